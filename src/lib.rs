//! yy: control plane, Runner, guest agent and operator CLI for a platform of Hermes agents.
//!
//! One binary plays every role; `src/bin/yy.rs` only parses arguments and hands over to
//! [`commands::run`].

pub mod api;
pub mod backup;
pub mod bench;
pub mod browser;
pub mod cli;
pub mod client;
pub mod commands;
pub mod computer;
pub mod egress;
pub mod error;
pub mod fsutil;
pub mod hermes;
pub mod output;
pub mod prom;
pub mod runner;
pub mod server;
pub mod sys;
pub mod timefmt;
pub mod web_view;

/// The version every role reports (Runner status, `/healthz`, image labels).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
