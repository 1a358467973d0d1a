//! A small blocking NBD client: fixed newstyle, `GO` with block sizes,
//! simple replies, one request at a time. For tests, benchmarks and
//! tools that must see exactly which request was acknowledged (a crash
//! test), where `qemu-io` hides it.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::proto::*;

/// A connected client.
pub struct Client {
    s: UnixStream,
    size: u64,
    flags: u16,
    cookie: u64,
}

/// What a request came to: `Ok` or the server's error number.
pub type Reply<T> = io::Result<Result<T, u32>>;

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

impl Client {
    /// Connects and negotiates the default export.
    pub fn connect(path: &Path) -> io::Result<Client> {
        let mut s = UnixStream::connect(path)?;
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello)?;
        if hello[0..8] != NBDMAGIC.to_be_bytes() || hello[8..16] != IHAVEOPT.to_be_bytes() {
            return Err(bad("not an NBD server"));
        }
        s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())?;
        let mut go = Vec::new();
        go.extend_from_slice(&IHAVEOPT.to_be_bytes());
        go.extend_from_slice(&OPT_GO.to_be_bytes());
        go.extend_from_slice(&8u32.to_be_bytes());
        go.extend_from_slice(&0u32.to_be_bytes());
        go.extend_from_slice(&1u16.to_be_bytes());
        go.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        s.write_all(&go)?;
        let (mut size, mut flags) = (None, 0);
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h)?;
            let typ = u32::from_be_bytes(h[12..16].try_into().expect("4"));
            let len = u32::from_be_bytes(h[16..20].try_into().expect("4"));
            if len > 1 << 16 {
                return Err(bad("option reply too long"));
            }
            let mut d = vec![0u8; len as usize];
            s.read_exact(&mut d)?;
            match typ {
                REP_ACK => break,
                REP_INFO if d.len() == 12 && d[0..2] == INFO_EXPORT.to_be_bytes() => {
                    size = Some(u64::from_be_bytes(d[2..10].try_into().expect("8")));
                    flags = u16::from_be_bytes([d[10], d[11]]);
                }
                REP_INFO => {}
                t => {
                    return Err(bad(format!(
                        "GO refused ({t:#x}): {}",
                        String::from_utf8_lossy(&d)
                    )))
                }
            }
        }
        let size = size.ok_or_else(|| bad("no export size"))?;
        Ok(Client {
            s,
            size,
            flags,
            cookie: 0,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The transmission flags the server sent.
    pub fn flags(&self) -> u16 {
        self.flags
    }

    fn request(&mut self, typ: u16, flags: u16, offset: u64, len: u32, data: &[u8]) -> Reply<()> {
        self.cookie += 1;
        let r = Request {
            flags,
            typ,
            cookie: self.cookie,
            offset,
            len,
        };
        self.s.write_all(&r.encode())?;
        self.s.write_all(data)?;
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h)?;
        if h[0..4] != SIMPLE_REPLY_MAGIC.to_be_bytes() {
            return Err(bad("bad reply magic"));
        }
        let error = u32::from_be_bytes(h[4..8].try_into().expect("4"));
        if u64::from_be_bytes(h[8..16].try_into().expect("8")) != self.cookie {
            return Err(bad("reply to another request"));
        }
        Ok(if error == 0 { Ok(()) } else { Err(error) })
    }

    pub fn read(&mut self, offset: u64, len: u32) -> Reply<Vec<u8>> {
        if let Err(e) = self.request(CMD_READ, 0, offset, len, &[])? {
            return Ok(Err(e));
        }
        let mut buf = vec![0u8; len as usize];
        self.s.read_exact(&mut buf)?;
        Ok(Ok(buf))
    }

    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Reply<()> {
        let flags = if fua { CMD_FLAG_FUA } else { 0 };
        self.request(CMD_WRITE, flags, offset, data.len() as u32, data)
    }

    pub fn flush(&mut self) -> Reply<()> {
        self.request(CMD_FLUSH, 0, 0, 0, &[])
    }

    pub fn trim(&mut self, offset: u64, len: u32) -> Reply<()> {
        self.request(CMD_TRIM, 0, offset, len, &[])
    }

    /// `WRITE_ZEROES`; `no_hole` keeps the range allocated.
    pub fn zero(&mut self, offset: u64, len: u32, no_hole: bool) -> Reply<()> {
        let flags = if no_hole { CMD_FLAG_NO_HOLE } else { 0 };
        self.request(CMD_WRITE_ZEROES, flags, offset, len, &[])
    }

    /// Ends the session (`DISC`).
    pub fn disconnect(mut self) -> io::Result<()> {
        let r = Request {
            flags: 0,
            typ: CMD_DISC,
            cookie: 0,
            offset: 0,
            len: 0,
        };
        self.s.write_all(&r.encode())
    }
}
