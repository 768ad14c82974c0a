//! The core is sans-IO: this test reads the crate's sources and its dependency list and
//! fails if any of them reaches for a clock, the OS's randomness, files, sockets,
//! threads, processes, the environment or hash-ordered collections. Clippy's
//! `disallowed-methods`/`disallowed-types` (core/clippy.toml) enforce the same at the
//! call sites; this test also catches paths clippy cannot see (imports, macros, features).

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::net",
    "std::thread",
    "std::process",
    "std::env",
    "SystemTime",
    "Instant",
    "Utc::now",
    "Local::now",
    "OsRng",
    "thread_rng",
    "getrandom",
    "HashMap",
    "HashSet",
    "tokio",
    "async_std",
    "smol",
    "unsafe ",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn core_sources_have_no_io_clock_or_os_randomness() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "sources not found");
    let mut hits = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // Unit-test modules may use test-only helpers; they never ship.
        let shipped = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in shipped.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                if code.contains(bad) {
                    hits.push(format!(
                        "{}:{}: `{bad}` in: {}",
                        f.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "the core must stay sans-IO:\n{}",
        hits.join("\n")
    );
}

#[test]
fn core_dependencies_enable_no_os_randomness() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps = manifest.split("[dev-dependencies]").next().unwrap();
    for bad in [
        "getrandom",
        "\"std_rng\"",
        "os_rng",
        "tokio",
        "smol",
        "rusqlite",
    ] {
        assert!(!deps.contains(bad), "core dependency list mentions {bad}");
    }
}
