//! Reading the shared vector files of `testdata/wire/` (packet vectors) and `testdata/wire/frames/` (frame vectors):
//! the same directory listing, JSON loading and hex conversions for both vector tests.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

/// `testdata/wire/` joined with `sub` ("" for the packet vectors, "frames" for the frame vectors).
pub fn vector_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../testdata/wire").join(sub)
}

/// The `.json` files directly in `dir`, sorted.
pub fn vector_paths(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

pub fn load(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

pub fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("odd-length hex string {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            let pair = hex.get(i..i + 2).ok_or_else(|| format!("non-ASCII hex string {hex:?}"))?;
            u8::from_str_radix(pair, 16).map_err(|e| format!("bad hex {pair:?}: {e}"))
        })
        .collect()
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How many vectors `dir` holds, and how many of them are invalid (`"valid": false`).
pub fn inventory(dir: &Path) -> Result<(usize, usize), String> {
    let paths = vector_paths(dir)?;
    let mut invalid = 0;
    for path in &paths {
        if load(path)?["valid"] == Value::Bool(false) {
            invalid += 1;
        }
    }
    Ok((paths.len(), invalid))
}

/// Runs the `inventory` trial, then `check` on every vector of `dir`, one trial each (a listing error shows up as
/// the inventory trial's failure).
pub fn run(dir: PathBuf, inventory: fn() -> Result<(), Failed>, check: fn(&Path) -> Result<(), Failed>) -> ! {
    let args = Arguments::from_args();
    let mut trials = vec![Trial::test("inventory", inventory)];
    for path in vector_paths(&dir).unwrap_or_default() {
        let name = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
        trials.push(Trial::test(name, move || check(&path)));
    }
    libtest_mimic::run(&args, trials).exit();
}
