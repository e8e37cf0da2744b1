//! The fixed numbers of the wire format (wire-format section 1): version, sizes and the default port.

/// The only wire-format version; any other is dropped (`bad_version`).
pub const VERSION: u8 = 1;
/// Length of the flow header.
pub const HEADER_LEN: usize = 24;
/// Largest tng packet (UDP payload): a 1500-byte IPv4 MTU less the IPv4 and UDP headers.
pub const MAX_PACKET: usize = 1472;
/// Smallest datagram carrying a client INITIAL (anti-amplification).
pub const MIN_CLIENT_INITIAL: usize = 1200;
/// AEAD (AES-256-GCM) tag length: the smallest sealed payload.
pub const TAG_LEN: usize = 16;
/// UDP port switches recognise tng on unless configured otherwise.
pub const DEFAULT_PORT: u16 = 4477;
/// The only section-encapsulation version (wire-format section 10).
pub const SECTION_VERSION: u8 = 1;
/// SECTION payload bytes before the inner packet: `section_version`, `next_hop_port`, `next_hop_address`.
pub const SECTION_PREFIX_LEN: usize = 19;
/// Largest end-to-end packet a section can carry: what an endpoint sending through a relay caps its datagrams at.
pub const MAX_SECTION_INNER: usize = MAX_PACKET - HEADER_LEN - SECTION_PREFIX_LEN;
