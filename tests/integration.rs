//! Every integration test of the crate, in one test binary.
//!
//! Each file here is a module of this one crate rather than a crate of its
//! own (`autotests = false` in Cargo.toml): one link of the whole dependency
//! graph instead of one per file, which is most of the disk and much of the
//! build time of `cargo test` on a small machine. nextest still runs every
//! test in its own process. Run one file's tests with
//! `cargo nextest run --all-features -E 'test(/^shell_props::/)'`
//! (or `cargo test --all-features --test integration shell_props::`).

mod cli_common;

mod admission_conformance;
mod admission_layers;
mod approval_always;
mod cli_admission_conformance;
mod cli_colour;
mod cli_escape;
mod cli_inspect;
mod cli_mcp;
mod cli_run;
mod cli_serve;
mod conformance;
mod engine_caches;
mod engine_compensation;
mod engine_conflict;
mod engine_detached;
mod engine_events;
mod engine_exec;
mod engine_facade;
mod engine_props;
mod events_file;
mod examples_permissions;
mod gate_approval;
mod gate_diff;
mod gate_facade;
mod gate_plan;
mod gate_supervision;
mod ir_roundtrip;
mod isolation_worktree;
mod ledger_mac;
mod mcp;
mod mcp_http;
mod mcp_npm;
mod permission_chain;
mod permission_tools;
mod planning_oracle;
mod policy_classify;
mod policy_engine;
mod policy_files;
mod policy_keywords;
mod policy_permission;
mod reliability_engine;
mod reliability_files;
mod reliability_hostile;
mod reliability_shell_regress;
mod runs_trace;
mod runtime_approvals;
mod runtime_builtins;
mod runtime_permissions;
mod sandbox;
mod sandbox_cli;
mod shared_state;
mod shell_constructs;
mod shell_fail_closed;
mod shell_match_cli;
mod shell_props;
mod shell_reference;
mod shell_variants;
mod store_conformance;
mod suspend_resume;
mod tool_context;
#[cfg(feature = "fetch")]
mod tool_fetch;
mod tools_confinement;
mod unknown_fields;
mod verify_facade;
mod verify_oracle_bridge;
mod verify_props;
