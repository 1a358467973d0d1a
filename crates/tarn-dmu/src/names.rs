//! Pool and dataset name rules.
