//! The consent matrix, the reply corpus, and the naive baseline both are scored against.

pub mod baseline;
pub mod matrix;
pub mod replies;
pub mod stripe;

pub use matrix::{
    eval, load, run_scenario, Arena, EvalError, Label, Matrix, Run, Running, Scenario, Variant,
};
