//! `actiongate hash-password`: the argon2 hash of a password read from standard input, for
//! `actiongate.console.operators`.

use std::process::ExitCode;

/// Reads one line from standard input and prints its hash; exit code 2 without one.
pub fn run() -> ExitCode {
    let mut password = String::new();
    let read = std::io::stdin().read_line(&mut password);
    let password = password.trim_end_matches(['\r', '\n']);
    if read.is_err() || password.is_empty() {
        eprintln!("error: give the password on standard input");
        return ExitCode::from(2);
    }
    println!("{}", crate::console::auth::hash_password(password));
    ExitCode::SUCCESS
}
