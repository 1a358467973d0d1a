//! Dataset and pool property definitions.
