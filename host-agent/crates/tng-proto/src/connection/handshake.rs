//! The Noise `XX` handshake (wire-format section 5) over snow.
//!
//! XX because a client does not always know the server's key: both static keys travel encrypted, the client may
//! pin the server's identity after message 2, and the server learns the client's identity from message 3. The
//! prologue `"tng/1" || provisional connection id` binds the id to the transcript. Ephemeral keys come from a
//! per-handshake seed drawn from the endpoint's seeded RNG, so simulations replay byte for byte.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

use crate::connection::crypto::PacketProtection;
use crate::identity::{Identity, StaticKeypair};

const NOISE_PATTERN: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE_PREFIX: &[u8] = b"tng/1";
/// Bytes a Noise message adds around its payload at most in XX: an ephemeral key, an encrypted static key and two
/// tags.
pub(crate) const NOISE_OVERHEAD: usize = 32 + 32 + 16 + 16;

/// Why a handshake message could not be produced or accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoiseError {
    #[error("noise: {0}")]
    Snow(String),
    #[error("the peer's static key is missing or malformed")]
    NoRemoteStatic,
}

impl From<snow::Error> for NoiseError {
    fn from(error: snow::Error) -> Self {
        NoiseError::Snow(error.to_string())
    }
}

/// snow's default primitives with a seeded RNG for the ephemeral keys.
struct SeededResolver {
    seed: [u8; 32],
}

struct SeededRandom(ChaCha20Rng);

impl Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRandom(ChaCha20Rng::from_seed(self.seed))))
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// One side of a handshake in progress.
pub(crate) struct Handshake {
    state: snow::HandshakeState,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake").field("initiator", &self.state.is_initiator()).finish_non_exhaustive()
    }
}

impl Handshake {
    fn build(
        keypair: &StaticKeypair,
        provisional_id: u64,
        seed: [u8; 32],
        initiator: bool,
    ) -> Result<Handshake, NoiseError> {
        let params: NoiseParams = NOISE_PATTERN.parse()?;
        let mut prologue = PROLOGUE_PREFIX.to_vec();
        prologue.extend_from_slice(&provisional_id.to_be_bytes());
        let builder = snow::Builder::with_resolver(params, Box::new(SeededResolver { seed }))
            .local_private_key(keypair.private_key())?
            .prologue(&prologue)?;
        let state = if initiator { builder.build_initiator()? } else { builder.build_responder()? };
        Ok(Handshake { state })
    }

    pub(crate) fn initiator(keypair: &StaticKeypair, provisional_id: u64, seed: [u8; 32]) -> Result<Self, NoiseError> {
        Self::build(keypair, provisional_id, seed, true)
    }

    pub(crate) fn responder(keypair: &StaticKeypair, provisional_id: u64, seed: [u8; 32]) -> Result<Self, NoiseError> {
        Self::build(keypair, provisional_id, seed, false)
    }

    /// The next Noise message carrying `payload`.
    pub(crate) fn write(&mut self, payload: &[u8]) -> Result<Vec<u8>, NoiseError> {
        let mut message = vec![0; payload.len() + NOISE_OVERHEAD];
        let len = self.state.write_message(payload, &mut message)?;
        message.truncate(len);
        Ok(message)
    }

    /// Reads the peer's next Noise message and returns its payload. On failure the handshake is as before (snow
    /// restores its transcript), so a forged message cannot break a genuine handshake.
    pub(crate) fn read(&mut self, message: &[u8]) -> Result<Vec<u8>, NoiseError> {
        let mut payload = vec![0; message.len()];
        let len = self.state.read_message(message, &mut payload)?;
        payload.truncate(len);
        Ok(payload)
    }

    /// The peer's identity, once its static key was read (client: after message 2; server: after message 3).
    pub(crate) fn remote_identity(&self) -> Result<Identity, NoiseError> {
        self.state.get_remote_static().map(Identity::of_public_key).ok_or(NoiseError::NoRemoteStatic)
    }

    /// The packet-protection keys of the finished handshake: the first split key protects client-to-server
    /// packets, the second server-to-client.
    pub(crate) fn into_protection(mut self) -> Result<PacketProtection, NoiseError> {
        if !self.state.is_handshake_finished() {
            return Err(NoiseError::Snow("handshake not finished".into()));
        }
        let (initiator_key, responder_key) = self.state.dangerously_get_raw_split();
        Ok(if self.state.is_initiator() {
            PacketProtection::new(initiator_key, responder_key)
        } else {
            PacketProtection::new(responder_key, initiator_key)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xx_handshake_gives_matching_keys_and_identities() -> Result<(), NoiseError> {
        let client_key = StaticKeypair::from_seed(1);
        let server_key = StaticKeypair::from_seed(2);
        let mut client = Handshake::initiator(&client_key, 99, [1; 32])?;
        let mut server = Handshake::responder(&server_key, 99, [2; 32])?;
        let first = client.write(&[])?;
        server.read(&first)?;
        let second = server.write(b"conn id")?;
        assert_eq!(client.read(&second)?, b"conn id");
        assert_eq!(client.remote_identity()?, server_key.identity());
        let third = client.write(b"frames")?;
        assert_eq!(server.read(&third)?, b"frames");
        assert_eq!(server.remote_identity()?, client_key.identity());

        let mut client_keys = client.into_protection()?;
        let server_keys = server.into_protection()?;
        let mut sealed = b"data".to_vec();
        assert!(client_keys.seal(1, b"ad", &mut sealed, 0));
        let (plain, _) = server_keys.open(false, 1, b"ad", &sealed).expect("same keys");
        assert_eq!(plain, b"data");
        Ok(())
    }

    #[test]
    fn prologue_binds_the_provisional_id() -> Result<(), NoiseError> {
        let mut client = Handshake::initiator(&StaticKeypair::from_seed(1), 1, [1; 32])?;
        let mut server = Handshake::responder(&StaticKeypair::from_seed(2), 2, [2; 32])?;
        server.read(&client.write(&[])?)?;
        let second = server.write(&[])?;
        assert!(client.read(&second).is_err());
        Ok(())
    }

    #[test]
    fn forged_message_leaves_the_handshake_usable() -> Result<(), NoiseError> {
        let mut client = Handshake::initiator(&StaticKeypair::from_seed(1), 5, [1; 32])?;
        let mut server = Handshake::responder(&StaticKeypair::from_seed(2), 5, [2; 32])?;
        server.read(&client.write(&[])?)?;
        let second = server.write(&[])?;
        let mut forged = second.clone();
        forged[40] ^= 0xff;
        assert!(client.read(&forged).is_err());
        assert!(client.read(&[1, 2, 3]).is_err());
        client.read(&second)?;
        Ok(())
    }

    #[test]
    fn same_seed_same_messages() -> Result<(), NoiseError> {
        let key = StaticKeypair::from_seed(3);
        let first = Handshake::initiator(&key, 1, [7; 32])?.write(&[])?;
        assert_eq!(Handshake::initiator(&key, 1, [7; 32])?.write(&[])?, first);
        assert_ne!(Handshake::initiator(&key, 1, [8; 32])?.write(&[])?, first);
        Ok(())
    }
}
