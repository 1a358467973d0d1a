//! Space map log records (owned by the pool layer; see docs/FORMAT.md)
