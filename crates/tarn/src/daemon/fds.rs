//! File descriptors that travel with a request (`SCM_RIGHTS`).
//!
//! `zfs send` and `zfs receive` hand the daemon their stdout/stdin and
//! stderr with the request line, so a stream goes between the daemon and
//! the pipe directly. The client attaches them to the first bytes of the
//! line ([`send_with_fds`]); the daemon reads every connection through
//! [`FdReader`], which keeps what arrives with the bytes, and the request
//! takes them once its line is complete ([`FdReader::take`]). Unclaimed
//! descriptors are closed when the next line starts. At most
//! [`PASSED_FDS_MAX`] per message are accepted; the kernel closes any
//! beyond the control buffer.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use parking_lot::Mutex;

/// Descriptors one message may carry.
pub const PASSED_FDS_MAX: usize = 4;

/// Reads a Unix socket, keeping the descriptors that arrive with it.
pub struct FdReader {
    stream: UnixStream,
    fds: Arc<Mutex<Vec<OwnedFd>>>,
}

impl FdReader {
    pub fn new(stream: UnixStream) -> FdReader {
        FdReader {
            stream,
            fds: Arc::default(),
        }
    }

    /// A handle on the descriptors received so far.
    pub fn received(&self) -> Arc<Mutex<Vec<OwnedFd>>> {
        self.fds.clone()
    }
}

impl Read for FdReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut iov = [IoSliceMut::new(buf)];
        let mut space = nix::cmsg_space!([RawFd; PASSED_FDS_MAX]);
        let msg = recvmsg::<()>(
            self.stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let n = msg.bytes;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    let mut kept = self.fds.lock();
                    for fd in fds {
                        // SAFETY: the kernel just installed `fd` in this
                        // process for us; nothing else owns it.
                        kept.push(unsafe { OwnedFd::from_raw_fd(fd) });
                    }
                }
            }
        }
        Ok(n)
    }
}

/// Writes `bytes` to `stream` with `fds` attached to the first of them.
pub fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let cmsg = [ControlMessage::ScmRights(fds)];
    let iov = [IoSlice::new(bytes)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    let n = loop {
        match sendmsg::<()>(stream.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    io::Write::write_all(&mut &*stream, &bytes[n..])
}
