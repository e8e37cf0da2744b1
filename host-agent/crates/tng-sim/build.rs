//! Marks unoptimized builds, so the heavy scenario tests run whenever the build is optimized (`make test` builds
//! with profile `ci`, optimized with debug assertions) and are skipped in a plain `cargo test`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(unoptimized)");
    if std::env::var("OPT_LEVEL").is_ok_and(|level| level == "0") {
        println!("cargo::rustc-cfg=unoptimized");
    }
}
