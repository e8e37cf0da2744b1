//! Signatures by a host's static X25519 key: XEdDSA (Signal's specification). X25519 keys only agree on secrets,
//! so the private scalar signs as an Ed25519 key whose public key is the Edwards form of the X25519 key with sign
//! bit 0: any Ed25519 verifier checks the signature once it maps the key (u -> y = (u - 1) / (u + 1)). This lets a
//! host prove that a message (its registration in the controller's host registry) comes from its identity, with no
//! second key to store or bind to the first.

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::montgomery::MontgomeryPoint;
use curve25519_dalek::scalar::Scalar;
use sha2::{Digest, Sha512};

use crate::identity::{StaticKeypair, KEY_LEN};

pub const SIGNATURE_LEN: usize = 64;

impl StaticKeypair {
    /// Signs `message`; `nonce` is 64 random bytes (XEdDSA's Z), which keep the signature's secret nonce
    /// unpredictable even to an observer of side channels; the signature stays sound with any value.
    pub fn sign(&self, message: &[u8], nonce: &[u8; 64]) -> [u8; SIGNATURE_LEN] {
        let k = Scalar::from_bytes_mod_order(clamp(*self.private_key()));
        let public = EdwardsPoint::mul_base(&k).compress();
        // The public key is used with sign bit 0: if kB has sign 1, -k is the scalar whose point has sign 0.
        let negative = public.as_bytes()[31] >> 7 == 1;
        let a = if negative { -k } else { k };
        let mut public = public.to_bytes();
        public[31] &= 0x7f;
        let mut hash1 = Sha512::new();
        hash1.update([0xfe]);
        hash1.update([0xff; 31]);
        hash1.update(a.as_bytes());
        hash1.update(message);
        hash1.update(nonce);
        let r = Scalar::from_bytes_mod_order_wide(&hash1.finalize().into());
        let big_r = EdwardsPoint::mul_base(&r).compress();
        let h = challenge(big_r.as_bytes(), &public, message);
        let s = r + h * a;
        let mut signature = [0; SIGNATURE_LEN];
        signature[..32].copy_from_slice(big_r.as_bytes());
        signature[32..].copy_from_slice(s.as_bytes());
        signature
    }
}

/// Whether `signature` is the holder of the X25519 `public_key`'s signature of `message`.
pub fn verify(public_key: &[u8; KEY_LEN], message: &[u8], signature: &[u8; SIGNATURE_LEN]) -> bool {
    let mut u = *public_key;
    u[31] &= 0x7f;
    let Some(a) = MontgomeryPoint(u).to_edwards(0) else { return false };
    let Some(r) = CompressedEdwardsY(signature[..32].try_into().unwrap_or_default()).decompress() else {
        return false;
    };
    let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(signature[32..].try_into().unwrap_or_default()))
    else {
        return false;
    };
    let h = challenge(&signature[..32], a.compress().as_bytes(), message);
    EdwardsPoint::vartime_double_scalar_mul_basepoint(&-h, &a, &s) == r
}

fn challenge(r: &[u8], public: &[u8; 32], message: &[u8]) -> Scalar {
    let mut hash = Sha512::new();
    hash.update(r);
    hash.update(public);
    hash.update(message);
    Scalar::from_bytes_mod_order_wide(&hash.finalize().into())
}

fn clamp(mut bytes: [u8; 32]) -> [u8; 32] {
    bytes[0] &= 248;
    bytes[31] &= 127;
    bytes[31] |= 64;
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_with_the_x25519_public_key_only() {
        for seed in 0..8 {
            // Both signs of kB occur among these keys, so both branches of the sign fix are exercised.
            let keypair = StaticKeypair::from_seed(seed);
            let signature = keypair.sign(b"registration", &[seed as u8; 64]);
            assert!(verify(keypair.public_key(), b"registration", &signature));
            assert!(!verify(keypair.public_key(), b"registratioN", &signature));
            let other = StaticKeypair::from_seed(seed + 100);
            assert!(!verify(other.public_key(), b"registration", &signature));
            let mut bent = signature;
            bent[40] ^= 1;
            assert!(!verify(keypair.public_key(), b"registration", &bent));
        }
    }

    #[test]
    fn the_edwards_key_has_the_sign_of_either_point() {
        let signs: Vec<u8> = (0..8)
            .map(|seed| {
                let k = Scalar::from_bytes_mod_order(clamp(*StaticKeypair::from_seed(seed).private_key()));
                EdwardsPoint::mul_base(&k).compress().as_bytes()[31] >> 7
            })
            .collect();
        assert!(signs.contains(&0) && signs.contains(&1), "{signs:?}");
    }
}
