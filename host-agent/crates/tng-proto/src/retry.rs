//! Stateless retry tokens (wire-format section 5): a server under load answers a first INITIAL with a token
//! instead of keeping state; a client that repeats its INITIAL with the token proves it receives at its address.
//!
//! Token v1 (opaque to clients): `issued_at` (8 bytes, nanoseconds of the server's clock) then a 16-byte BLAKE2s MAC,
//! keyed with a secret only the server knows, over `issued_at`, the client address and port and the provisional
//! connection id. Nothing is stored: the MAC is the state.

use std::net::SocketAddr;
use std::time::Duration;

use blake2::digest::consts::U16;
use blake2::digest::Mac;
use blake2::Blake2sMac;

use crate::time::Time;

/// How long a token is accepted after it was issued.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(10);

const MAC_LEN: usize = 16;
/// Length of every token this server issues.
pub(crate) const TOKEN_LEN: usize = 8 + MAC_LEN;

type TokenMac = Blake2sMac<U16>;

/// Issues and checks retry tokens with one server secret.
#[derive(Clone)]
pub(crate) struct TokenKey {
    secret: [u8; 32],
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    pub(crate) fn new(secret: [u8; 32]) -> TokenKey {
        TokenKey { secret }
    }

    /// The MAC over a token's bound fields, ready to finalize or verify.
    fn mac(&self, issued_at: u64, client: SocketAddr, provisional_id: u64) -> Option<TokenMac> {
        let mut mac = <TokenMac as Mac>::new_from_slice(&self.secret).ok()?;
        mac.update(&issued_at.to_be_bytes());
        match client {
            SocketAddr::V4(address) => {
                mac.update(&[4]);
                mac.update(&address.ip().octets());
            }
            SocketAddr::V6(address) => {
                mac.update(&[6]);
                mac.update(&address.ip().octets());
            }
        }
        mac.update(&client.port().to_be_bytes());
        mac.update(&provisional_id.to_be_bytes());
        Some(mac)
    }

    /// A token for `client` asking with `provisional_id` at `now`.
    pub(crate) fn issue(&self, now: Time, client: SocketAddr, provisional_id: u64) -> Vec<u8> {
        let issued_at = now.as_nanos();
        let mut token = issued_at.to_be_bytes().to_vec();
        if let Some(mac) = self.mac(issued_at, client, provisional_id) {
            token.extend_from_slice(&mac.finalize().into_bytes());
        }
        token
    }

    /// Whether `token` was issued by this key, for this client address and provisional id, at most
    /// [`TOKEN_LIFETIME`] ago (and not in the future).
    pub(crate) fn validate(&self, now: Time, token: &[u8], client: SocketAddr, provisional_id: u64) -> bool {
        if token.len() != TOKEN_LEN {
            return false;
        }
        let (issued_at, tag) = token.split_at(8);
        let issued_at = u64::from_be_bytes(issued_at.try_into().unwrap_or_default());
        let issued = Time::from_nanos(issued_at);
        if issued > now || now.saturating_since(issued) > TOKEN_LIFETIME {
            return false;
        }
        // `verify_slice` compares in constant time: the tag must not leak through timing.
        self.mac(issued_at, client, provisional_id).is_some_and(|mac| mac.verify_slice(tag).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_binds_address_id_and_time() {
        let key = TokenKey::new([7; 32]);
        let client: SocketAddr = "10.0.0.1:5000".parse().expect("address");
        let now = Time::from_millis(1_000);
        let token = key.issue(now, client, 42);
        assert_eq!(token.len(), TOKEN_LEN);
        assert!(key.validate(now + Duration::from_secs(10), &token, client, 42));
        assert!(!key.validate(now + Duration::from_millis(10_001), &token, client, 42), "expired");
        assert!(!key.validate(Time::from_millis(999), &token, client, 42), "from the future");
        assert!(!key.validate(now, &token, "10.0.0.1:5001".parse().expect("address"), 42), "other port");
        assert!(!key.validate(now, &token, client, 43), "other id");
        assert!(!TokenKey::new([8; 32]).validate(now, &token, client, 42), "other server");
        let mut forged = token.clone();
        forged[3] ^= 1;
        assert!(!key.validate(now, &forged, client, 42));
        assert!(!key.validate(now, &token[..10], client, 42));
        assert!(!key.validate(now, &[], client, 42));
    }
}
