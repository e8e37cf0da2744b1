//! Identity key files: the static Noise private key as 64 hex digits, readable only by its owner.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use tng_proto::StaticKeypair;

pub fn generate(out: &Path, force: bool) -> Result<StaticKeypair> {
    if out.exists() && !force {
        bail!("{} exists; pass --force to replace it (its identity would be lost)", out.display());
    }
    let keypair = StaticKeypair::generate(&mut rand::rngs::OsRng);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("cannot write key file {}", out.display()))?;
    writeln!(file, "{}", keypair.to_hex())?;
    Ok(keypair)
}

pub fn load(path: &Path) -> Result<StaticKeypair> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read key file {}", path.display()))?;
    StaticKeypair::from_hex(text.trim())
        .with_context(|| format!("{} is not a tng key file (expected 64 hex digits from 'tng keygen')", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_key_loads_back_with_the_same_identity_and_is_private() {
        let path = std::env::temp_dir().join(format!("tng-key-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let keypair = generate(&path, false).unwrap();
        assert_eq!(load(&path).unwrap().identity(), keypair.identity());
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
        assert!(generate(&path, false).unwrap_err().to_string().contains("--force"));
        std::fs::write(&path, "not a key").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("not a tng key file"));
        std::fs::remove_file(&path).unwrap();
    }
}
