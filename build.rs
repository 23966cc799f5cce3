//! Lists the migration files for the library: `migrations/{sqlite,postgres}/NNNN_name.sql`
//! become `(version, description, SQL)` tables in `OUT_DIR/migrations.rs`, as sqlx's
//! `migrate!` would read them, without that macro's build cost (its proc-macro links a
//! second copy of sqlx's drivers: 15 s of a clean build on two cores).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    // Read when the script runs, not baked in when it is compiled: two checkouts sharing
    // one target directory share this script's binary, and each must list its own files.
    // They share its output too (cargo keeps it while this checkout's `migrations` is older
    // than the last run, whichever checkout made it), so the tables name no directory: each
    // `include_str!` takes the one of the library being compiled.
    let root = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let mut out = String::new();
    for dialect in ["sqlite", "postgres"] {
        let dir = Path::new(&root).join("migrations").join(dialect);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "sql"))
            .collect();
        files.sort();
        let _ = writeln!(
            out,
            "pub const {}: &[(i64, &str, &str)] = &[",
            dialect.to_uppercase()
        );
        for path in files {
            let stem = path.file_stem().unwrap().to_str().unwrap();
            let (version, name) = stem
                .split_once('_')
                .unwrap_or_else(|| panic!("{}: not NNNN_name.sql", path.display()));
            let version: i64 = version
                .parse()
                .unwrap_or_else(|_| panic!("{}: not NNNN_name.sql", path.display()));
            let file = path.file_name().unwrap().to_str().unwrap();
            let _ = writeln!(
                out,
                "    ({version}, {:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/migrations/{dialect}/{file}\"))),",
                name.replace('_', " "),
            );
        }
        out.push_str("];\n");
    }
    let target = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(target, out).unwrap();
}
