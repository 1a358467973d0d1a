//! `zpool scrub` and what `zpool status` shows of it: the scan line and the
//! permanent errors. The scrub itself runs in the dataset layer
//! (`tarn_dsl::Pool::scrub_start`, see tarn-dsl's `scan`).

use tarn_dsl::{Pool, ScanFunc, ScanPhase};

use crate::api::{ScanFunction, ScanState, ScanStatus, ScrubAction};
use crate::backend::BackendError;
use crate::engine::dsl_err;
use crate::engine::mounts::Mounts;

/// Starts, resumes, pauses or cancels the scrub of one pool.
pub(crate) fn scrub(pool: &Pool, action: ScrubAction) -> Result<(), BackendError> {
    let r = match action {
        ScrubAction::Start => pool.scrub_start(),
        ScrubAction::Pause => pool.scrub_pause(),
        ScrubAction::Stop => pool.scrub_cancel(),
    };
    r.map_err(dsl_err)
}

/// The scan line of `zpool status`: `None` before the first scrub.
pub(crate) fn scan_status(pool: &Pool) -> Option<ScanStatus> {
    let progress = pool.scan_progress();
    let p = progress.phys;
    let function = match p.func {
        ScanFunc::None => return None,
        ScanFunc::Scrub => ScanFunction::Scrub,
        ScanFunc::Resilver => ScanFunction::Resilver,
    };
    let state = match p.state {
        ScanPhase::None => return None,
        ScanPhase::Scanning => ScanState::Scanning,
        ScanPhase::Finished => ScanState::Finished,
        ScanPhase::Canceled => ScanState::Canceled,
    };
    Some(ScanStatus {
        function,
        state,
        start_time: p.start_time,
        end_time: (p.end_time != 0).then_some(p.end_time),
        examined: p.examined,
        issued: p.issued,
        to_examine: p.to_examine,
        processed: p.processed,
        errors: p.errors,
        pause_time: (p.pause_time != 0).then_some(p.pause_time),
        pass_start: progress.pass_start,
        pass_issued: progress.pass_issued,
    })
}

/// Permanent errors as `zpool status -v` lists them: a file of a mounted
/// filesystem by its path, anything else by number as OpenZFS names an
/// object it cannot resolve (`tank/fs:<0x23>`, `<metadata>:<0x5>`).
///
/// A suspended pool's paths are not looked up: a reader waiting for
/// `zpool clear` may hold the dataset while it waits, and `zpool status`
/// must answer then above all.
pub(crate) fn permanent_errors(pool: &Pool, mounts: &Mounts) -> Vec<String> {
    let resolve = pool.spa().suspended().is_none();
    pool.permanent_errors()
        .into_iter()
        .map(|(ds, obj)| match ds {
            Some(ds) => resolve
                .then(|| mounts.file_path(&ds, obj))
                .flatten()
                .unwrap_or_else(|| format!("{ds}:<0x{obj:x}>")),
            None => format!("<metadata>:<0x{obj:x}>"),
        })
        .collect()
}
