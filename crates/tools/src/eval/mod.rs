//! The consent matrix and the naive baseline it is scored against.

pub mod baseline;
pub mod matrix;

pub use matrix::{
    eval, load, run_scenario, Arena, EvalError, Label, Matrix, Run, Running, Scenario, Variant,
};
