//! Packet protection (wire-format section 6): AES-256-GCM with the per-direction keys the Noise handshake
//! produced, an explicit nonce `(channel_id << 56) | packet_number`, and header bytes 0-17 as associated data.
//!
//! Why not snow's `StatelessTransportState`: its `write_message(nonce, ..)` takes no associated data, and the header
//! must be bound to the payload. So the handshake hands over its raw split keys (`dangerously_get_raw_split`) and
//! this module runs AES-256-GCM the way Noise's `AESGCM` cipher functions do (nonce: 4 zero bytes, then the 64-bit
//! counter big-endian; `REKEY` for key updates), adding the associated data.
//!
//! Why AES-256-GCM from `ring` rather than the handshake's ChaCha20-Poly1305: sealing every packet is the agent's
//! largest CPU cost, and ring's AES-NI/VAES + carry-less-multiply code seals several times faster on the x86 and ARM
//! hosts tng runs on (ring falls back to constant-time software AES elsewhere). The split keys are uniformly random
//! 32-byte HKDF outputs used by this one cipher only, so which AEAD the handshake itself used does not matter.

use std::time::Duration;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use tng_wire::TAG_LEN;

use crate::time::Time;

/// Largest packet number a channel may use: nonce `u64::MAX` is reserved for Noise `REKEY`, and the nonce has 56
/// bits for the packet number.
pub(crate) const MAX_PACKET_NUMBER: u64 = (1 << 56) - 2;

/// The AEAD nonce of a packet: unique per key because packet numbers are per channel and per direction.
pub(crate) fn packet_nonce(channel_id: u8, packet_number: u64) -> u64 {
    (u64::from(channel_id) << 56) | (packet_number & ((1 << 56) - 1))
}

/// Noise's `AESGCM` nonce encoding of a 64-bit counter.
fn noise_nonce(counter: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// One direction's key of one generation.
#[derive(Clone)]
pub(crate) struct PacketKey {
    cipher: LessSafeKey,
}

impl PacketKey {
    pub(crate) fn new(raw: [u8; 32]) -> PacketKey {
        // ring rejects only keys of the wrong length, and AES-256 takes exactly 32 bytes.
        let key = UnboundKey::new(&AES_256_GCM, &raw).expect("a 32-byte key is an AES-256 key");
        PacketKey { cipher: LessSafeKey::new(key) }
    }

    /// Noise `REKEY(k)`: the first 32 bytes of `ENCRYPT(k, 2^64 - 1, "", zeros)`.
    pub(crate) fn next(&self) -> PacketKey {
        let mut raw = [0u8; 32];
        // Encryption of 32 bytes cannot fail (ring refuses only inputs over 64 GB); if it ever did, the zero key
        // would make the peer fail to open every packet, never a silent reuse of the old key.
        if self.cipher.seal_in_place_separate_tag(noise_nonce(u64::MAX), Aad::empty(), &mut raw).is_err() {
            raw = [0; 32];
        }
        PacketKey::new(raw)
    }

    /// Seals `packet[start..]` in place (it becomes the ciphertext) and appends the tag: a packet is built in the
    /// buffer it leaves in, without a copy of its plaintext.
    pub(crate) fn seal(&self, nonce: u64, associated_data: &[u8], packet: &mut Vec<u8>, start: usize) -> bool {
        let Some(plaintext) = packet.get_mut(start..) else { return false };
        match self.cipher.seal_in_place_separate_tag(noise_nonce(nonce), Aad::from(associated_data), plaintext) {
            Ok(tag) => {
                packet.extend_from_slice(tag.as_ref());
                true
            }
            Err(_) => false,
        }
    }

    /// The plaintext of `sealed`, or `None` if it does not authenticate under this key.
    pub(crate) fn open(&self, nonce: u64, associated_data: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < TAG_LEN {
            return None;
        }
        let mut buffer = sealed.to_vec();
        let plaintext_len =
            self.cipher.open_in_place(noise_nonce(nonce), Aad::from(associated_data), &mut buffer).ok()?.len();
        buffer.truncate(plaintext_len);
        Some(buffer)
    }
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PacketKey(..)")
    }
}

/// Which receive key opened a packet; applied with [`PacketProtection::commit`] only once the packet proved valid.
#[derive(Debug)]
pub(crate) enum OpenedWith {
    Current,
    Previous,
    /// The peer started a key update: the next generation's key opened the packet (boxed: an expanded AES key is
    /// large, and this is the rare case).
    Next(Box<PacketKey>),
}

/// Both directions' keys with key update (wire-format section 6): `KEY_PHASE` is the low bit of the key
/// generation; after a peer's update the previous receive key stays for a while to open reordered packets.
#[derive(Debug)]
pub(crate) struct PacketProtection {
    send: PacketKey,
    send_generation: u64,
    sent_in_generation: u64,
    recv: PacketKey,
    recv_generation: u64,
    /// The receive key of the previous generation and when it is discarded.
    recv_previous: Option<(PacketKey, Time)>,
    /// The peer acknowledged a packet sealed with the current send key, so it opens this generation and the next
    /// update may start (as in QUIC: the peer's *receive* side must have caught up, not just its send side).
    peer_confirmed: bool,
    updates: u64,
}

impl PacketProtection {
    pub(crate) fn new(send: [u8; 32], recv: [u8; 32]) -> PacketProtection {
        PacketProtection {
            send: PacketKey::new(send),
            send_generation: 0,
            sent_in_generation: 0,
            recv: PacketKey::new(recv),
            recv_generation: 0,
            recv_previous: None,
            peer_confirmed: false,
            updates: 0,
        }
    }

    /// The `KEY_PHASE` bit of packets sealed now.
    pub(crate) fn key_phase(&self) -> bool {
        self.send_generation & 1 == 1
    }

    /// Key updates this side initiated or followed.
    pub(crate) fn updates(&self) -> u64 {
        self.updates
    }

    /// The generation of the send key, recorded with each sent packet.
    pub(crate) fn send_generation(&self) -> u64 {
        self.send_generation
    }

    /// The peer acknowledged a packet sealed in send generation `generation`.
    pub(crate) fn on_acknowledged(&mut self, generation: u64) {
        if generation == self.send_generation {
            self.peer_confirmed = true;
        }
    }

    /// Seals `packet[start..]` in place with the current send key; see [`PacketKey::seal`].
    pub(crate) fn seal(&mut self, nonce: u64, associated_data: &[u8], packet: &mut Vec<u8>, start: usize) -> bool {
        self.sent_in_generation = self.sent_in_generation.saturating_add(1);
        self.send.seal(nonce, associated_data, packet, start)
    }

    /// Opens a packet sealed under `key_phase`, without changing any state.
    pub(crate) fn open(
        &self,
        key_phase: bool,
        nonce: u64,
        associated_data: &[u8],
        sealed: &[u8],
    ) -> Option<(Vec<u8>, OpenedWith)> {
        if key_phase == (self.recv_generation & 1 == 1) {
            return self.recv.open(nonce, associated_data, sealed).map(|plain| (plain, OpenedWith::Current));
        }
        // The other phase is either a reordered packet of the previous generation or the peer's next generation;
        // the AEAD tells which.
        if let Some((previous, _)) = &self.recv_previous {
            if let Some(plain) = previous.open(nonce, associated_data, sealed) {
                return Some((plain, OpenedWith::Previous));
            }
        }
        let next = self.recv.next();
        next.open(nonce, associated_data, sealed).map(|plain| (plain, OpenedWith::Next(Box::new(next))))
    }

    /// Applies what opening a valid packet revealed. `keep_previous` is how long the old receive key stays (3 PTO).
    pub(crate) fn commit(&mut self, now: Time, opened: OpenedWith, keep_previous: Duration) {
        match opened {
            OpenedWith::Previous | OpenedWith::Current => {}
            OpenedWith::Next(next) => {
                let old = std::mem::replace(&mut self.recv, *next);
                self.recv_previous = Some((old, now + keep_previous));
                self.recv_generation += 1;
                if self.send_generation < self.recv_generation {
                    // The peer initiated: follow with our send key.
                    self.send = self.send.next();
                    self.send_generation += 1;
                    self.sent_in_generation = 0;
                    self.peer_confirmed = false;
                    self.updates += 1;
                }
            }
        }
    }

    /// Starts a key update when `interval` packets went out under the current key, the peer acknowledged one of them
    /// and our previous receive key is gone (so at most two receive keys exist on either side).
    pub(crate) fn maybe_initiate_update(&mut self, interval: u64) -> bool {
        if interval == 0
            || self.sent_in_generation < interval
            || !self.peer_confirmed
            || self.recv_previous.is_some()
            || self.send_generation != self.recv_generation
        {
            return false;
        }
        self.send = self.send.next();
        self.send_generation += 1;
        self.sent_in_generation = 0;
        self.peer_confirmed = false;
        self.updates += 1;
        true
    }

    pub(crate) fn next_timeout(&self) -> Option<Time> {
        self.recv_previous.as_ref().map(|(_, discard_at)| *discard_at)
    }

    pub(crate) fn handle_timeout(&mut self, now: Time) {
        if self.recv_previous.as_ref().is_some_and(|(_, discard_at)| *discard_at <= now) {
            self.recv_previous = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (PacketProtection, PacketProtection) {
        (PacketProtection::new([1; 32], [2; 32]), PacketProtection::new([2; 32], [1; 32]))
    }

    fn send(from: &mut PacketProtection, nonce: u64, text: &[u8]) -> (bool, Vec<u8>) {
        let mut sealed = text.to_vec();
        assert!(from.seal(nonce, b"header", &mut sealed, 0));
        (from.key_phase(), sealed)
    }

    #[test]
    fn seals_and_opens_and_rejects_tampering() {
        let (mut client, server) = pair();
        let (phase, sealed) = send(&mut client, 5, b"hello");
        assert_eq!(sealed.len(), 5 + TAG_LEN);
        let (plain, _) = server.open(phase, 5, b"header", &sealed).expect("opens");
        assert_eq!(plain, b"hello");
        assert!(server.open(phase, 6, b"header", &sealed).is_none(), "wrong nonce");
        assert!(server.open(phase, 5, b"HEADER", &sealed).is_none(), "wrong associated data");
        let mut tampered = sealed.clone();
        tampered[0] ^= 1;
        assert!(server.open(phase, 5, b"header", &tampered).is_none());
        assert!(server.open(phase, 5, b"header", &sealed[..10]).is_none());
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn counting_key() -> [u8; 32] {
        std::array::from_fn(|i| i as u8)
    }

    /// Vectors computed independently with pyca/cryptography's AESGCM (OpenSSL), from wire-format section 6: nonce =
    /// 4 zero bytes, then `(channel_id << 56) | packet_number` big-endian.
    #[test]
    fn seal_matches_aes_256_gcm_with_noise_nonce_encoding() {
        // Sealed behind a header that stays as it is, as in a packet.
        let mut sealed = b"HDR".to_vec();
        sealed.extend_from_slice(b"tng packet");
        assert!(PacketKey::new(counting_key()).seal(packet_nonce(7, 0x01_0203_0405), b"header", &mut sealed, 3));
        assert_eq!(&sealed[..3], b"HDR");
        assert_eq!(hex(&sealed[3..]), "d66c35dc1f6361cd72a2593dd0a5d5cdccce56a6846604498c70");
    }

    #[test]
    fn rekey_matches_noise_definition() {
        // REKEY(k) = ENCRYPT(k, 2^64 - 1, "", 32 zero bytes)[..32]; the vector is the new key's tag of nothing.
        let mut tag = Vec::new();
        assert!(PacketKey::new(counting_key()).next().seal(0, &[], &mut tag, 0));
        assert_eq!(hex(&tag), "0a55ff2fbe56435a0285049024fbee4c");

        let key = PacketKey::new([9; 32]);
        let seal = |key: &PacketKey| {
            let mut out = b"probe".to_vec();
            assert!(key.seal(0, &[], &mut out, 0));
            out
        };
        assert_eq!(seal(&key.next()), seal(&key.next()));
        assert_ne!(seal(&key.next()), seal(&key));
        assert_eq!(seal(&key.next().next()), seal(&PacketKey::new([9; 32]).next().next()));
    }

    #[test]
    fn key_update_is_followed_and_old_key_opens_reordered_packets() {
        let (mut client, mut server) = pair();
        let keep = Duration::from_secs(1);
        let (old_phase, old_packet) = send(&mut client, 1, b"old");
        assert!(!client.maybe_initiate_update(5), "not enough packets yet");
        client.on_acknowledged(0);
        for nonce in 2..6 {
            send(&mut client, nonce, b"x");
        }
        assert!(client.maybe_initiate_update(5));
        let (new_phase, new_packet) = send(&mut client, 10, b"new");
        assert_ne!(old_phase, new_phase);

        let (plain, opened) = server.open(new_phase, 10, b"header", &new_packet).expect("next key");
        assert_eq!(plain, b"new");
        server.commit(Time::ZERO, opened, keep);
        assert_eq!(server.key_phase(), new_phase, "server followed the update");
        let (plain, opened) = server.open(old_phase, 1, b"header", &old_packet).expect("previous key");
        assert_eq!(plain, b"old");
        server.commit(Time::ZERO, opened, keep);
        server.handle_timeout(Time::from_millis(1_000));
        assert!(server.open(old_phase, 1, b"header", &old_packet).is_none(), "previous key discarded");

        let (phase, reply) = send(&mut server, 3, b"reply");
        let (_, opened) = client.open(phase, 3, b"header", &reply).expect("client opens reply");
        client.commit(Time::ZERO, opened, keep);
        assert_eq!((client.updates(), server.updates()), (1, 1));
        // The next update waits until the peer acknowledged a packet of the current generation.
        for nonce in 20..30 {
            send(&mut client, nonce, b"x");
        }
        client.handle_timeout(Time::from_millis(1_000));
        assert!(!client.maybe_initiate_update(5), "nothing of generation 1 acknowledged yet");
        client.on_acknowledged(0);
        assert!(!client.maybe_initiate_update(5), "an acknowledgement of the old generation does not count");
        client.on_acknowledged(1);
        assert!(client.maybe_initiate_update(5));
    }
}
