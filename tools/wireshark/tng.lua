-- Wireshark dissector for tng, wire format version 1 (docs/wire-format.md is the single source of truth).
--
-- Decodes the 24-byte flow header, the cleartext framing of INITIAL and RETRY, and shows the payload of the sealed
-- types (DATA, ACK, PROBE, CLOSE) as sealed bytes: their frames are AES-256-GCM ciphertext. A relay's SECTION shows its
-- prefix and the end-to-end packet it carries as bytes, a SECTION_ACK its cleartext frames as bytes. A packet that breaks a
-- receiver rule of wire-format section 8 gets expert info naming the rule and a `tng.error` field holding the
-- rule's name (the `error` string of the shared vectors in testdata/wire/), so `tng.error` filters malformed packets.
--
-- Use: tshark -X lua_script:tools/wireshark/tng.lua -r capture.pcap  (or copy it into Wireshark's plugins folder).
-- UDP port 4477 is decoded as tng; any other UDP port is tried heuristically (a well-formed header is required).

local tng = Proto("tng", "tng multipath transport")

local PORT = 4477
local HEADER_LEN = 24
local MAX_PACKET = 1472
local MIN_CLIENT_INITIAL = 1200
local TAG_LEN = 16
local INITIAL_PREFIX_LEN = 5
local RETRY_PREFIX_LEN = 2
local RESERVED_FLAGS = 0xF8
local SERVER_STAGE = 2
local SECTION_VERSION = 1
local SECTION_PREFIX_LEN = 19

local INITIAL, RETRY, SECTION, SECTION_ACK = 0x01, 0x02, 0x07, 0x08
local PACKET_TYPES = {
    [0x01] = "INITIAL",
    [0x02] = "RETRY",
    [0x03] = "DATA",
    [0x04] = "ACK",
    [0x05] = "PROBE",
    [0x06] = "CLOSE",
    [0x07] = "SECTION",
    [0x08] = "SECTION_ACK",
}
local STAGES = {
    [1] = "client -> server (Noise message 1)",
    [2] = "server -> client (Noise message 2)",
    [3] = "client -> server (Noise message 3)",
}
-- Feedback fields: the values with a meaning of their own (section 2).
local QUEUE_LEVELS = { [0] = "neutral: no queue seen", [0xFFFF] = "reserved, read as 65534 (2.097 s or more)" }
local RATE_HINTS = { [0] = "pause: send nothing now", [0xFFFFFFFF] = "neutral: no information" }

local f = {
    version = ProtoField.uint8("tng.version", "Version", base.DEC),
    packet_type = ProtoField.uint8("tng.packet_type", "Packet type", base.HEX, PACKET_TYPES),
    flags = ProtoField.uint8("tng.flags", "Flags", base.HEX),
    ecn_capable = ProtoField.bool("tng.flags.ecn_capable", "ECN_CAPABLE", 8, nil, 0x01),
    feedback_echo = ProtoField.bool("tng.flags.feedback_echo", "FEEDBACK_ECHO", 8, nil, 0x02),
    key_phase = ProtoField.bool("tng.flags.key_phase", "KEY_PHASE", 8, nil, 0x04),
    reserved_flags = ProtoField.uint8("tng.flags.reserved", "Reserved (must be 0)", base.HEX, nil, RESERVED_FLAGS),
    channel_id = ProtoField.uint8("tng.channel_id", "Channel", base.DEC),
    connection_id = ProtoField.uint64("tng.connection_id", "Connection id", base.HEX),
    packet_number = ProtoField.uint32("tng.packet_number", "Packet number (low 32 bits)", base.DEC),
    payload_length = ProtoField.uint16("tng.payload_length", "Payload length", base.DEC),
    queue_level = ProtoField.uint16("tng.queue_level", "Queue level (32 us units)", base.DEC, QUEUE_LEVELS),
    rate_hint = ProtoField.uint32("tng.rate_hint", "Rate hint (kbit/s)", base.DEC, RATE_HINTS),
    stage = ProtoField.uint8("tng.initial.stage", "Stage", base.DEC, STAGES),
    initial_token_length = ProtoField.uint16("tng.initial.token_length", "Token length", base.DEC),
    noise_length = ProtoField.uint16("tng.initial.noise_length", "Noise message length", base.DEC),
    initial_token = ProtoField.bytes("tng.initial.token", "Retry token"),
    noise = ProtoField.bytes("tng.initial.noise", "Noise handshake message"),
    padding_len = ProtoField.uint16("tng.initial.padding_len", "Padding length", base.DEC),
    padding = ProtoField.bytes("tng.initial.padding", "Padding"),
    retry_token_length = ProtoField.uint16("tng.retry.token_length", "Token length", base.DEC),
    retry_token = ProtoField.bytes("tng.retry.token", "Retry token"),
    sealed = ProtoField.bytes("tng.sealed", "Sealed payload (AES-256-GCM: frames and tag)"),
    tag = ProtoField.bytes("tng.sealed.tag", "AEAD tag"),
    section_version = ProtoField.uint8("tng.section.section_version", "Section version", base.DEC),
    next_hop_port = ProtoField.uint16("tng.section.next_hop_port", "Next hop port (0: learned)", base.DEC),
    next_hop_address = ProtoField.bytes("tng.section.next_hop_address", "Next hop address (IPv6, IPv4-mapped)"),
    inner = ProtoField.bytes("tng.section.inner", "End-to-end packet (unchanged)"),
    section_frames = ProtoField.bytes("tng.section_ack.frames", "Cleartext ACK / FEEDBACK_ECHO / PADDING frames"),
    error = ProtoField.string("tng.error", "Receiver rule broken (wire-format section 8)"),
}
tng.fields = {}
for _, field in pairs(f) do
    table.insert(tng.fields, field)
end

-- One expert entry per receiver rule of section 8, named as the vectors' `error` strings.
local RULES = {
    too_large = "rule 0: more than 1472 bytes",
    truncated_header = "rule 1: fewer than 24 bytes",
    bad_version = "rule 2: version is not 1",
    unknown_type = "rule 3: unknown packet type",
    reserved_flags = "rule 4: reserved flag bits set",
    length_mismatch = "rule 5: payload_length differs from the bytes after the header",
    handshake_length = "rule 6: handshake lengths overrun the payload",
    bad_stage = "rule 6: INITIAL stage is not 1, 2 or 3",
    initial_too_small = "rule 6: client INITIAL under 1200 bytes",
    short_sealed_payload = "rule 6: sealed payload under 16 bytes",
    bad_section = "rule 6: SECTION under 19 + 24 bytes or of another section version, or SECTION_ACK empty",
}
local experts = {}
tng.experts = {}
for name, rule in pairs(RULES) do
    experts[name] = ProtoExpert.new("tng." .. name, rule, expert.group.MALFORMED, expert.severity.ERROR)
    table.insert(tng.experts, experts[name])
end
local snapped = ProtoExpert.new(
    "tng.snapped", "bytes cut by the capture's snap length", expert.group.UNDECODED, expert.severity.NOTE
)
table.insert(tng.experts, snapped)

-- Flags a broken rule on `item`: expert info plus the generated `tng.error` field.
local function flag(tree, item, name, detail)
    item:add_proto_expert_info(experts[name], name .. " (" .. RULES[name] .. "): " .. detail)
    tree:add(f.error, name):set_generated()
    return name
end

-- True when the capture holds the `length` bytes at `offset`; else notes on `tree` that the snap length cut them.
local function captured(tvb, tree, offset, length)
    if tvb:len() >= offset + length then
        return true
    end
    tree:add_proto_expert_info(snapped, string.format("%d bytes at offset %d not captured", length, offset))
    return false
end

-- Adds `field` over `length` bytes at `offset`, or over the captured part of them when the snap length cut them.
local function add_bytes(tree, field, tvb, offset, length)
    local present = math.max(0, math.min(length, tvb:len() - offset))
    if present == 0 then
        if length > 0 then
            tree:add_proto_expert_info(snapped, string.format("%d bytes not captured", length))
        end
        return nil
    end
    local item = tree:add(field, tvb:range(offset, present))
    if present < length then
        item:add_proto_expert_info(snapped, string.format("%d of %d bytes captured", present, length))
    end
    return item
end

local function dissect_initial(tvb, tree, datagram_len, payload_len)
    local payload = tree:add(tvb:range(HEADER_LEN), "INITIAL handshake (cleartext framing)")
    if payload_len < INITIAL_PREFIX_LEN then
        return flag(tree, payload, "handshake_length", string.format("%d bytes, the fixed fields need 5", payload_len))
    end
    if not captured(tvb, payload, HEADER_LEN, INITIAL_PREFIX_LEN) then
        return nil
    end
    local stage = tvb:range(HEADER_LEN, 1):uint()
    local token_length = tvb:range(HEADER_LEN + 1, 2):uint()
    local noise_length = tvb:range(HEADER_LEN + 3, 2):uint()
    local stage_item = payload:add(f.stage, tvb:range(HEADER_LEN, 1))
    local token_item = payload:add(f.initial_token_length, tvb:range(HEADER_LEN + 1, 2))
    payload:add(f.noise_length, tvb:range(HEADER_LEN + 3, 2))
    local framed = INITIAL_PREFIX_LEN + token_length + noise_length
    if framed > payload_len then
        return flag(tree, token_item, "handshake_length",
            string.format("5 + %d + %d bytes framed, payload has %d", token_length, noise_length, payload_len))
    end
    local offset = HEADER_LEN + INITIAL_PREFIX_LEN
    add_bytes(payload, f.initial_token, tvb, offset, token_length)
    add_bytes(payload, f.noise, tvb, offset + token_length, noise_length)
    payload:add(f.padding_len, payload_len - framed):set_generated()
    add_bytes(payload, f.padding, tvb, offset + token_length + noise_length, payload_len - framed)
    if STAGES[stage] == nil then
        return flag(tree, stage_item, "bad_stage", string.format("stage %d", stage))
    end
    if stage ~= SERVER_STAGE and datagram_len < MIN_CLIENT_INITIAL then
        return flag(tree, stage_item, "initial_too_small",
            string.format("stage %d in a %d-byte datagram", stage, datagram_len))
    end
    return nil
end

local function dissect_retry(tvb, tree, payload_len)
    local payload = tree:add(tvb:range(HEADER_LEN), "RETRY token")
    if payload_len < RETRY_PREFIX_LEN then
        return flag(tree, payload, "handshake_length", string.format("%d bytes, the token length needs 2", payload_len))
    end
    if not captured(tvb, payload, HEADER_LEN, RETRY_PREFIX_LEN) then
        return nil
    end
    local token_length = tvb:range(HEADER_LEN, 2):uint()
    local length_item = payload:add(f.retry_token_length, tvb:range(HEADER_LEN, 2))
    if payload_len ~= RETRY_PREFIX_LEN + token_length then
        return flag(tree, length_item, "handshake_length",
            string.format("payload is %d bytes, 2 + token_length is %d", payload_len, RETRY_PREFIX_LEN + token_length))
    end
    add_bytes(payload, f.retry_token, tvb, HEADER_LEN + RETRY_PREFIX_LEN, token_length)
    return nil
end

local function dissect_sealed(tvb, tree, payload_len)
    if payload_len == 0 then
        return flag(tree, tree, "short_sealed_payload", "empty payload")
    end
    local sealed = add_bytes(tree, f.sealed, tvb, HEADER_LEN, payload_len) or tree
    if payload_len < TAG_LEN then
        return flag(tree, sealed, "short_sealed_payload", string.format("%d bytes", payload_len))
    end
    add_bytes(sealed, f.tag, tvb, HEADER_LEN + payload_len - TAG_LEN, TAG_LEN)
    return nil
end

local function dissect_section(tvb, tree, payload_len)
    local payload = tree:add(tvb:range(HEADER_LEN), "SECTION (relay encapsulation)")
    if payload_len < SECTION_PREFIX_LEN + HEADER_LEN then
        return flag(tree, payload, "bad_section",
            string.format("%d bytes, the prefix and an inner flow header need %d", payload_len,
                SECTION_PREFIX_LEN + HEADER_LEN))
    end
    if not captured(tvb, payload, HEADER_LEN, SECTION_PREFIX_LEN) then
        return nil
    end
    local version = tvb:range(HEADER_LEN, 1):uint()
    local version_item = payload:add(f.section_version, tvb:range(HEADER_LEN, 1))
    payload:add(f.next_hop_port, tvb:range(HEADER_LEN + 1, 2))
    payload:add(f.next_hop_address, tvb:range(HEADER_LEN + 3, 16))
    if version ~= SECTION_VERSION then
        return flag(tree, version_item, "bad_section", string.format("section version %d", version))
    end
    add_bytes(payload, f.inner, tvb, HEADER_LEN + SECTION_PREFIX_LEN, payload_len - SECTION_PREFIX_LEN)
    return nil
end

local function dissect_section_ack(tvb, tree, payload_len)
    if payload_len == 0 then
        return flag(tree, tree, "bad_section", "SECTION_ACK without frames")
    end
    add_bytes(tree, f.section_frames, tvb, HEADER_LEN, payload_len)
    return nil
end

-- Applies the receiver rules in the order of section 8 while building the tree; returns the broken rule or nil.
local function dissect_packet(tvb, tree, datagram_len)
    -- Rule 0 (too_large) and rule 1 exclude each other; rule 0 is checked below, once the header is shown.
    if datagram_len < HEADER_LEN then
        return flag(tree, tree, "truncated_header", string.format("%d bytes", datagram_len))
    end
    if not captured(tvb, tree, 0, HEADER_LEN) then
        return nil
    end
    local version = tvb:range(0, 1):uint()
    local packet_type = tvb:range(1, 1):uint()
    local flags = tvb:range(2, 1):uint()
    local payload_length = tvb:range(16, 2):uint()
    local payload_len = datagram_len - HEADER_LEN

    local header = tree:add(tvb:range(0, HEADER_LEN), "Flow header")
    local version_item = header:add(f.version, tvb:range(0, 1))
    local type_item = header:add(f.packet_type, tvb:range(1, 1))
    local flags_item = header:add(f.flags, tvb:range(2, 1))
    flags_item:add(f.ecn_capable, tvb:range(2, 1))
    flags_item:add(f.feedback_echo, tvb:range(2, 1))
    flags_item:add(f.key_phase, tvb:range(2, 1))
    flags_item:add(f.reserved_flags, tvb:range(2, 1))
    header:add(f.channel_id, tvb:range(3, 1))
    header:add(f.connection_id, tvb:range(4, 8))
    header:add(f.packet_number, tvb:range(12, 4))
    local length_item = header:add(f.payload_length, tvb:range(16, 2))
    header:add(f.queue_level, tvb:range(18, 2))
    header:add(f.rate_hint, tvb:range(20, 4))
    if datagram_len > MAX_PACKET then
        return flag(tree, tree, "too_large", string.format("%d bytes", datagram_len))
    end

    if version ~= 1 then
        return flag(tree, version_item, "bad_version", string.format("version %d", version))
    end
    if PACKET_TYPES[packet_type] == nil then
        return flag(tree, type_item, "unknown_type", string.format("type 0x%02x", packet_type))
    end
    if bit32.band(flags, RESERVED_FLAGS) ~= 0 then
        return flag(tree, flags_item, "reserved_flags", string.format("flags 0x%02x", flags))
    end
    if payload_length ~= payload_len then
        return flag(tree, length_item, "length_mismatch",
            string.format("payload_length %d, %d bytes follow the header", payload_length, payload_len))
    end
    if packet_type == INITIAL then
        return dissect_initial(tvb, tree, datagram_len, payload_len)
    elseif packet_type == RETRY then
        return dissect_retry(tvb, tree, payload_len)
    elseif packet_type == SECTION then
        return dissect_section(tvb, tree, payload_len)
    elseif packet_type == SECTION_ACK then
        return dissect_section_ack(tvb, tree, payload_len)
    end
    return dissect_sealed(tvb, tree, payload_len)
end

local function summary(tvb, datagram_len)
    if datagram_len < HEADER_LEN then
        return "truncated"
    end
    if tvb:len() < HEADER_LEN then
        return "header not captured"
    end
    local packet_type = tvb:range(1, 1):uint()
    local text = string.format("%s ch=%d cid=0x%s pn=%d",
        PACKET_TYPES[packet_type] or string.format("type 0x%02x", packet_type),
        tvb:range(3, 1):uint(), tvb:range(4, 8):bytes():tohex():lower(), tvb:range(12, 4):uint())
    if packet_type == INITIAL and datagram_len >= HEADER_LEN + 1 and tvb:len() > HEADER_LEN then
        text = text .. string.format(" stage=%d", tvb:range(HEADER_LEN, 1):uint())
    end
    return text
end

local function dissect(tvb, pinfo, tree)
    -- The reported length counts bytes a snap length cut off: the rules are about the datagram, not the capture.
    local datagram_len = tvb:reported_len()
    pinfo.cols.protocol = "TNG"
    local root = tree:add(tng, tvb:range(0, math.min(tvb:len(), datagram_len)))
    local broken = dissect_packet(tvb, root, datagram_len)
    local info = summary(tvb, datagram_len)
    if broken then
        info = info .. " [" .. broken .. "]"
    end
    pinfo.cols.info = info
    root:append_text(", " .. info)
    return datagram_len
end

-- Heuristic for other UDP ports: claims only datagrams whose header passes rules 0-5 exactly.
local function heuristic(tvb, pinfo, tree)
    local datagram_len = tvb:reported_len()
    if datagram_len < HEADER_LEN or datagram_len > MAX_PACKET or tvb:len() < HEADER_LEN then
        return false
    end
    if tvb:range(0, 1):uint() ~= 1 or PACKET_TYPES[tvb:range(1, 1):uint()] == nil then
        return false
    end
    if bit32.band(tvb:range(2, 1):uint(), RESERVED_FLAGS) ~= 0 then
        return false
    end
    if tvb:range(16, 2):uint() ~= datagram_len - HEADER_LEN then
        return false
    end
    -- The local function, not tng.dissector: that is a handle whose call would push a second tng layer.
    dissect(tvb, pinfo, tree)
    return true
end

tng.dissector = dissect
DissectorTable.get("udp.port"):add(PORT, tng)
tng:register_heuristic("udp", heuristic)
