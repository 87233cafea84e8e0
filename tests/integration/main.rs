//! Integration tests: real `rill-server` processes on 127.0.0.1 ports, killed and restarted.
//!
//! Build the binaries first (`cargo build --bins`); `.ci/run` does. Files are named by
//! priority: `t10_…` basic paths first, failure scenarios after.

// Black-box tests drive real processes on the real clock; the determinism seam is for node code.
#![allow(clippy::disallowed_methods)]
// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

mod t05_fixture;
mod t10_produce_consume;
mod t12_kafka_listener;
mod t13_kafka_under_faults;
mod t14_kafka_leader_hints;
mod t15_client_api;
mod t20_leader_kill;
mod t30_min_insync;
mod t40_majority_down;
mod t45_retention;
mod t46_compaction;
mod t47_disk_full;
mod t48_corruption;
mod t50_bad_input;
mod t55_trust_boundary;
mod t56_hostile_requests;
mod t57_certificate_rotation;
mod t60_restart;
mod t70_cli;
mod t75_rill_dev;
mod t80_topic_admin;
mod t85_coordinators;
mod t86_consumer_groups;
mod t87_transactions;
mod t88_invoicer;
mod t89_idempotent_consumer;
mod t90_idempotence;
mod t95_node_join;
mod t96_leader_balance;
mod t97_quiescence;
mod t98_share_groups;
