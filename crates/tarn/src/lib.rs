//! tarn: the one binary — `tarn daemon`, `tarn zpool …`, `tarn zfs …`.
//!
//! Bird's-eye view of this crate (the top layer of tarn):
//!
//! ```text
//!  tarn zpool/zfs …  ──cli──▶ client ──JSON line──▶ daemon ──validate──▶ Backend (engine)
//!        ▲                                             │
//!        └──────────── output (zpool/zfs text) ◀───────┘ result rows
//! ```
//!
//! - [`cli`]: clap definitions mirroring zpool(8)/zfs(8) (each flag defined
//!   once, with its help), turning arguments into [`api::Request`]s and
//!   results into text through [`output`].
//! - [`client`]: one request over the socket; starts the daemon on demand.
//! - [`daemon`]: socket server, connection threads, lock, signals, shutdown.
//! - [`validate`]: the gate every request passes before the engine sees it.
//! - [`api`]: the protocol types; [`backend`]: the engine's contract.
//! - [`vdevspec`]: the vdev grammar and the replication-level check.
//! - [`cachefile`]: pools to re-import at start; [`paths`], [`limits`].
//!
//! **Architecture invariant:** the engine is reached only through
//! [`backend::Backend`], and only with validated requests; nothing in this
//! crate touches pool storage directly.

pub mod api;
pub mod backend;
pub mod cachefile;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod engine;
pub mod limits;
pub mod output;
pub mod paths;
pub mod validate;
pub mod vdevspec;
pub mod verbs;
