//! OpenZFS-compatible capacity accounting (see docs and REFERENCE).
