//! (owned by the object layer; see docs/FORMAT.md)
