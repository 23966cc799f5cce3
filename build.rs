//! Builds again when a migration file is added: sqlx's `migrate!` reads `migrations/`
//! when the library compiles.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
