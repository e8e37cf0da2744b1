//! Self-certifying host identities: an [`Identity`] is the BLAKE2s-256 hash of a host's static X25519 public key,
//! so whoever completes a Noise handshake with that key has proven the identity, with no certificate authority.

use std::fmt;
use std::str::FromStr;

use blake2::{Blake2s256, Digest};
use curve25519_dalek::montgomery::MontgomeryPoint;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

/// Length of a static key, private or public (X25519).
pub const KEY_LEN: usize = 32;

/// A host's stable name: BLAKE2s-256 of its static public key. Survives address changes; printed as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity(pub [u8; 32]);

impl Identity {
    /// The identity of the holder of `public_key`.
    pub fn of_public_key(public_key: &[u8]) -> Identity {
        Identity(Blake2s256::digest(public_key).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({self})")
    }
}

/// A string that is not 64 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an identity is 64 hex digits, got {0:?}")]
pub struct IdentityParseError(pub String);

impl FromStr for Identity {
    type Err = IdentityParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        decode_hex::<32>(text).map(Identity).ok_or_else(|| IdentityParseError(text.to_owned()))
    }
}

/// A host's static X25519 key pair: the private half authenticates the host in every handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKeypair {
    private: [u8; KEY_LEN],
    public: [u8; KEY_LEN],
}

impl StaticKeypair {
    /// A fresh key pair drawn from `rng`.
    pub fn generate(rng: &mut impl RngCore) -> StaticKeypair {
        let mut private = [0; KEY_LEN];
        rng.fill_bytes(&mut private);
        StaticKeypair::from_bytes(private)
    }

    /// A key pair determined by `seed`, for simulations and tests that must replay exactly.
    pub fn from_seed(seed: u64) -> StaticKeypair {
        StaticKeypair::generate(&mut ChaCha20Rng::seed_from_u64(seed))
    }

    /// The key pair whose private key is `private` (as written by [`StaticKeypair::to_bytes`]); the public key is
    /// derived, so a key file holds only the 32 private bytes.
    pub fn from_bytes(private: [u8; KEY_LEN]) -> StaticKeypair {
        let public = MontgomeryPoint::mul_base_clamped(private).to_bytes();
        StaticKeypair { private, public }
    }

    /// The private key, for a key file.
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        self.private
    }

    /// The private key as 64 hex digits, for a text key file.
    pub fn to_hex(&self) -> String {
        self.private.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// Reads what [`StaticKeypair::to_hex`] wrote (surrounding whitespace allowed).
    pub fn from_hex(text: &str) -> Option<StaticKeypair> {
        decode_hex::<KEY_LEN>(text.trim()).map(StaticKeypair::from_bytes)
    }

    pub fn public_key(&self) -> &[u8; KEY_LEN] {
        &self.public
    }

    pub(crate) fn private_key(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    pub fn identity(&self) -> Identity {
        Identity::of_public_key(&self.public)
    }
}

impl fmt::Debug for StaticKeypair {
    /// Never prints the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticKeypair").field("identity", &self.identity()).finish_non_exhaustive()
    }
}

fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_through_hex() {
        let identity = StaticKeypair::from_seed(7).identity();
        let text = identity.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(text.parse::<Identity>(), Ok(identity));
        assert!("00".parse::<Identity>().is_err());
        assert!("zz".repeat(32).parse::<Identity>().is_err());
    }

    #[test]
    fn keypair_round_trips_and_is_deterministic() {
        let keypair = StaticKeypair::from_seed(1);
        assert_eq!(StaticKeypair::from_seed(1), keypair);
        assert_ne!(StaticKeypair::from_seed(2).identity(), keypair.identity());
        assert_eq!(StaticKeypair::from_bytes(keypair.to_bytes()), keypair);
        assert_eq!(StaticKeypair::from_hex(&format!("{}\n", keypair.to_hex())), Some(keypair.clone()));
        assert!(!format!("{keypair:?}").contains(&keypair.to_hex()));
    }

    #[test]
    fn public_key_matches_x25519_base_point_multiplication() {
        // RFC 7748 section 6.1 test vector (Alice).
        let private = decode_hex::<32>("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public = decode_hex::<32>("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        let keypair = StaticKeypair::from_bytes(private.unwrap_or_default());
        assert_eq!(Some(*keypair.public_key()), public);
    }
}
