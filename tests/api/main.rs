//! The product's integration tests, linked once: each module is a suite that runs
//! actiongate as its users meet it (real HTTP and gRPC servers, the embedded subscription
//! service, SQLite, and PostgreSQL where `scripts/test-postgres.sh` starts it).

mod common;

mod acceptance;
mod approvals;
mod cli;
mod consent;
mod console;
mod conversation;
mod durability;
mod eval;
mod events;
mod faults;
mod fuzz_regressions;
mod grpc;
mod model;
mod properties;
mod provenance;
mod replies;
mod stripe;
mod tls;
