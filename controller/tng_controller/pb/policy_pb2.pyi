from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Aggregation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGGREGATION_UNSPECIFIED: _ClassVar[Aggregation]
    AGGREGATION_IN_NETWORK: _ClassVar[Aggregation]
    AGGREGATION_AT_HOSTS: _ClassVar[Aggregation]

class SteeringMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEERING_MODE_UNSPECIFIED: _ClassVar[SteeringMode]
    STEERING_MODE_FLOW_HASH: _ClassVar[SteeringMode]
    STEERING_MODE_WEIGHTED: _ClassVar[SteeringMode]
    STEERING_MODE_QDEPL: _ClassVar[SteeringMode]
    STEERING_MODE_QDEPL_DATAPLANE: _ClassVar[SteeringMode]
    STEERING_MODE_LOWEST_RTT_FIRST: _ClassVar[SteeringMode]
    STEERING_MODE_LTE_ONLY: _ClassVar[SteeringMode]
    STEERING_MODE_WIFI_ONLY: _ClassVar[SteeringMode]
    STEERING_MODE_EARLIEST_ARRIVAL: _ClassVar[SteeringMode]
AGGREGATION_UNSPECIFIED: Aggregation
AGGREGATION_IN_NETWORK: Aggregation
AGGREGATION_AT_HOSTS: Aggregation
STEERING_MODE_UNSPECIFIED: SteeringMode
STEERING_MODE_FLOW_HASH: SteeringMode
STEERING_MODE_WEIGHTED: SteeringMode
STEERING_MODE_QDEPL: SteeringMode
STEERING_MODE_QDEPL_DATAPLANE: SteeringMode
STEERING_MODE_LOWEST_RTT_FIRST: SteeringMode
STEERING_MODE_LTE_ONLY: SteeringMode
STEERING_MODE_WIFI_ONLY: SteeringMode
STEERING_MODE_EARLIEST_ARRIVAL: SteeringMode

class Policy(_message.Message):
    __slots__ = ("name", "match", "switch_policy", "host_policy", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    SWITCH_POLICY_FIELD_NUMBER: _ClassVar[int]
    HOST_POLICY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    match: Match
    switch_policy: SwitchPolicy
    host_policy: HostPolicy
    revision: int
    def __init__(self, name: _Optional[str] = ..., match: _Optional[_Union[Match, _Mapping]] = ..., switch_policy: _Optional[_Union[SwitchPolicy, _Mapping]] = ..., host_policy: _Optional[_Union[HostPolicy, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class Match(_message.Message):
    __slots__ = ("priority", "traffic_class", "src_prefix", "dst_prefix", "ip_protocol", "src_port", "dst_port", "connection_id", "has_connection_id")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_CLASS_FIELD_NUMBER: _ClassVar[int]
    SRC_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DST_PREFIX_FIELD_NUMBER: _ClassVar[int]
    IP_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    CONNECTION_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_CONNECTION_ID_FIELD_NUMBER: _ClassVar[int]
    priority: int
    traffic_class: str
    src_prefix: str
    dst_prefix: str
    ip_protocol: int
    src_port: PortMatch
    dst_port: PortMatch
    connection_id: int
    has_connection_id: bool
    def __init__(self, priority: _Optional[int] = ..., traffic_class: _Optional[str] = ..., src_prefix: _Optional[str] = ..., dst_prefix: _Optional[str] = ..., ip_protocol: _Optional[int] = ..., src_port: _Optional[_Union[PortMatch, _Mapping]] = ..., dst_port: _Optional[_Union[PortMatch, _Mapping]] = ..., connection_id: _Optional[int] = ..., has_connection_id: _Optional[bool] = ...) -> None: ...

class PortMatch(_message.Message):
    __slots__ = ("value", "mask")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    value: int
    mask: int
    def __init__(self, value: _Optional[int] = ..., mask: _Optional[int] = ...) -> None: ...

class SwitchPolicy(_message.Message):
    __slots__ = ("aggregation", "steering", "lte_weight", "wifi_weight", "spill_threshold_packets", "visible", "backpressure")
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    LTE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIFI_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SPILL_THRESHOLD_PACKETS_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_FIELD_NUMBER: _ClassVar[int]
    aggregation: Aggregation
    steering: SteeringMode
    lte_weight: int
    wifi_weight: int
    spill_threshold_packets: int
    visible: Visible
    backpressure: Backpressure
    def __init__(self, aggregation: _Optional[_Union[Aggregation, str]] = ..., steering: _Optional[_Union[SteeringMode, str]] = ..., lte_weight: _Optional[int] = ..., wifi_weight: _Optional[int] = ..., spill_threshold_packets: _Optional[int] = ..., visible: _Optional[_Union[Visible, _Mapping]] = ..., backpressure: _Optional[_Union[Backpressure, _Mapping]] = ...) -> None: ...

class Visible(_message.Message):
    __slots__ = ("enabled", "hold_budget_us", "boost_threshold_packets", "max_retransmissions", "ewma_alpha", "ewma_beta", "segment_size", "hold_slack", "max_boosts", "idle_timeout_us", "report_bytes")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    HOLD_BUDGET_US_FIELD_NUMBER: _ClassVar[int]
    BOOST_THRESHOLD_PACKETS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRANSMISSIONS_FIELD_NUMBER: _ClassVar[int]
    EWMA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    EWMA_BETA_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOLD_SLACK_FIELD_NUMBER: _ClassVar[int]
    MAX_BOOSTS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_US_FIELD_NUMBER: _ClassVar[int]
    REPORT_BYTES_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    hold_budget_us: int
    boost_threshold_packets: int
    max_retransmissions: int
    ewma_alpha: int
    ewma_beta: int
    segment_size: int
    hold_slack: int
    max_boosts: int
    idle_timeout_us: int
    report_bytes: int
    def __init__(self, enabled: _Optional[bool] = ..., hold_budget_us: _Optional[int] = ..., boost_threshold_packets: _Optional[int] = ..., max_retransmissions: _Optional[int] = ..., ewma_alpha: _Optional[int] = ..., ewma_beta: _Optional[int] = ..., segment_size: _Optional[int] = ..., hold_slack: _Optional[int] = ..., max_boosts: _Optional[int] = ..., idle_timeout_us: _Optional[int] = ..., report_bytes: _Optional[int] = ...) -> None: ...

class Backpressure(_message.Message):
    __slots__ = ("feedback", "ecn_threshold_us")
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    ECN_THRESHOLD_US_FIELD_NUMBER: _ClassVar[int]
    feedback: bool
    ecn_threshold_us: int
    def __init__(self, feedback: _Optional[bool] = ..., ecn_threshold_us: _Optional[int] = ...) -> None: ...

class HostPolicy(_message.Message):
    __slots__ = ("congestion_control", "congestion_control_per_path", "scheduler", "tail_loss", "rate_cap_kbps", "queue_threshold_us", "copa_delta", "relay")
    class CongestionControlPerPathEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CONGESTION_CONTROL_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_CONTROL_PER_PATH_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    TAIL_LOSS_FIELD_NUMBER: _ClassVar[int]
    RATE_CAP_KBPS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_THRESHOLD_US_FIELD_NUMBER: _ClassVar[int]
    COPA_DELTA_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    congestion_control: str
    congestion_control_per_path: _containers.ScalarMap[int, str]
    scheduler: str
    tail_loss: str
    rate_cap_kbps: int
    queue_threshold_us: int
    copa_delta: float
    relay: str
    def __init__(self, congestion_control: _Optional[str] = ..., congestion_control_per_path: _Optional[_Mapping[int, str]] = ..., scheduler: _Optional[str] = ..., tail_loss: _Optional[str] = ..., rate_cap_kbps: _Optional[int] = ..., queue_threshold_us: _Optional[int] = ..., copa_delta: _Optional[float] = ..., relay: _Optional[str] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class SetPolicyResponse(_message.Message):
    __slots__ = ("policy", "switches")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    switches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., switches: _Optional[_Iterable[str]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeletePolicyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeletePolicyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyChange(_message.Message):
    __slots__ = ("set", "delete")
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    set: Policy
    delete: str
    def __init__(self, set: _Optional[_Union[Policy, _Mapping]] = ..., delete: _Optional[str] = ...) -> None: ...

class PolicyChangeResult(_message.Message):
    __slots__ = ("code", "message", "policy", "switches")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    policy: Policy
    switches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., switches: _Optional[_Iterable[str]] = ...) -> None: ...

class ListPoliciesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class WatchPoliciesRequest(_message.Message):
    __slots__ = ("traffic_classes",)
    TRAFFIC_CLASSES_FIELD_NUMBER: _ClassVar[int]
    traffic_classes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, traffic_classes: _Optional[_Iterable[str]] = ...) -> None: ...

class PolicyEvent(_message.Message):
    __slots__ = ("kind", "policy")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[PolicyEvent.Kind]
        KIND_SNAPSHOT: _ClassVar[PolicyEvent.Kind]
        KIND_SYNCED: _ClassVar[PolicyEvent.Kind]
        KIND_SET: _ClassVar[PolicyEvent.Kind]
        KIND_DELETED: _ClassVar[PolicyEvent.Kind]
    KIND_UNSPECIFIED: PolicyEvent.Kind
    KIND_SNAPSHOT: PolicyEvent.Kind
    KIND_SYNCED: PolicyEvent.Kind
    KIND_SET: PolicyEvent.Kind
    KIND_DELETED: PolicyEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    kind: PolicyEvent.Kind
    policy: Policy
    def __init__(self, kind: _Optional[_Union[PolicyEvent.Kind, str]] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyStats(_message.Message):
    __slots__ = ("name", "packets", "bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PACKETS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    packets: int
    bytes: int
    def __init__(self, name: _Optional[str] = ..., packets: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class PortStats(_message.Message):
    __slots__ = ("switch_name", "port", "role", "tx_packets", "tx_bytes", "rate_estimate_bps", "steered_packets")
    SWITCH_NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TX_PACKETS_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    RATE_ESTIMATE_BPS_FIELD_NUMBER: _ClassVar[int]
    STEERED_PACKETS_FIELD_NUMBER: _ClassVar[int]
    switch_name: str
    port: int
    role: str
    tx_packets: int
    tx_bytes: int
    rate_estimate_bps: float
    steered_packets: int
    def __init__(self, switch_name: _Optional[str] = ..., port: _Optional[int] = ..., role: _Optional[str] = ..., tx_packets: _Optional[int] = ..., tx_bytes: _Optional[int] = ..., rate_estimate_bps: _Optional[float] = ..., steered_packets: _Optional[int] = ...) -> None: ...

class MetricSample(_message.Message):
    __slots__ = ("name", "labels", "value")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    value: float
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., value: _Optional[float] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("policies", "ports", "controller_metrics")
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_METRICS_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[PolicyStats]
    ports: _containers.RepeatedCompositeFieldContainer[PortStats]
    controller_metrics: _containers.RepeatedCompositeFieldContainer[MetricSample]
    def __init__(self, policies: _Optional[_Iterable[_Union[PolicyStats, _Mapping]]] = ..., ports: _Optional[_Iterable[_Union[PortStats, _Mapping]]] = ..., controller_metrics: _Optional[_Iterable[_Union[MetricSample, _Mapping]]] = ...) -> None: ...

class ListSwitchesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SwitchStatus(_message.Message):
    __slots__ = ("name", "address", "device_id", "state", "pipeline_cookie", "last_error", "helper", "classified_flows", "qdepl_lte_share", "link_states")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_COOKIE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    HELPER_FIELD_NUMBER: _ClassVar[int]
    CLASSIFIED_FLOWS_FIELD_NUMBER: _ClassVar[int]
    QDEPL_LTE_SHARE_FIELD_NUMBER: _ClassVar[int]
    LINK_STATES_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    device_id: int
    state: str
    pipeline_cookie: int
    last_error: str
    helper: str
    classified_flows: int
    qdepl_lte_share: float
    link_states: _containers.RepeatedCompositeFieldContainer[RouteLinkState]
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., device_id: _Optional[int] = ..., state: _Optional[str] = ..., pipeline_cookie: _Optional[int] = ..., last_error: _Optional[str] = ..., helper: _Optional[str] = ..., classified_flows: _Optional[int] = ..., qdepl_lte_share: _Optional[float] = ..., link_states: _Optional[_Iterable[_Union[RouteLinkState, _Mapping]]] = ...) -> None: ...

class RouteLinkState(_message.Message):
    __slots__ = ("prefix", "probe_target", "rtts", "delay_difference_us", "delay_measured", "delay_state", "probes_sent", "probes_unanswered", "lte_delay_us", "wifi_delay_us", "lte_packet_us", "wifi_packet_us", "preferred_link", "spill_depth_packets", "hold_budget_us", "hold_slack_packets", "reorder_allowance_us")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PROBE_TARGET_FIELD_NUMBER: _ClassVar[int]
    RTTS_FIELD_NUMBER: _ClassVar[int]
    DELAY_DIFFERENCE_US_FIELD_NUMBER: _ClassVar[int]
    DELAY_MEASURED_FIELD_NUMBER: _ClassVar[int]
    DELAY_STATE_FIELD_NUMBER: _ClassVar[int]
    PROBES_SENT_FIELD_NUMBER: _ClassVar[int]
    PROBES_UNANSWERED_FIELD_NUMBER: _ClassVar[int]
    LTE_DELAY_US_FIELD_NUMBER: _ClassVar[int]
    WIFI_DELAY_US_FIELD_NUMBER: _ClassVar[int]
    LTE_PACKET_US_FIELD_NUMBER: _ClassVar[int]
    WIFI_PACKET_US_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_LINK_FIELD_NUMBER: _ClassVar[int]
    SPILL_DEPTH_PACKETS_FIELD_NUMBER: _ClassVar[int]
    HOLD_BUDGET_US_FIELD_NUMBER: _ClassVar[int]
    HOLD_SLACK_PACKETS_FIELD_NUMBER: _ClassVar[int]
    REORDER_ALLOWANCE_US_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    probe_target: str
    rtts: _containers.RepeatedCompositeFieldContainer[ProbeRtt]
    delay_difference_us: int
    delay_measured: bool
    delay_state: str
    probes_sent: int
    probes_unanswered: int
    lte_delay_us: int
    wifi_delay_us: int
    lte_packet_us: int
    wifi_packet_us: int
    preferred_link: str
    spill_depth_packets: int
    hold_budget_us: int
    hold_slack_packets: int
    reorder_allowance_us: int
    def __init__(self, prefix: _Optional[str] = ..., probe_target: _Optional[str] = ..., rtts: _Optional[_Iterable[_Union[ProbeRtt, _Mapping]]] = ..., delay_difference_us: _Optional[int] = ..., delay_measured: _Optional[bool] = ..., delay_state: _Optional[str] = ..., probes_sent: _Optional[int] = ..., probes_unanswered: _Optional[int] = ..., lte_delay_us: _Optional[int] = ..., wifi_delay_us: _Optional[int] = ..., lte_packet_us: _Optional[int] = ..., wifi_packet_us: _Optional[int] = ..., preferred_link: _Optional[str] = ..., spill_depth_packets: _Optional[int] = ..., hold_budget_us: _Optional[int] = ..., hold_slack_packets: _Optional[int] = ..., reorder_allowance_us: _Optional[int] = ...) -> None: ...

class ProbeRtt(_message.Message):
    __slots__ = ("sent_on", "answered_on", "min_rtt_us", "answers")
    SENT_ON_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_ON_FIELD_NUMBER: _ClassVar[int]
    MIN_RTT_US_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    sent_on: str
    answered_on: str
    min_rtt_us: int
    answers: int
    def __init__(self, sent_on: _Optional[str] = ..., answered_on: _Optional[str] = ..., min_rtt_us: _Optional[int] = ..., answers: _Optional[int] = ...) -> None: ...

class ListSwitchesResponse(_message.Message):
    __slots__ = ("switches",)
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedCompositeFieldContainer[SwitchStatus]
    def __init__(self, switches: _Optional[_Iterable[_Union[SwitchStatus, _Mapping]]] = ...) -> None: ...

class RegisterHostRequest(_message.Message):
    __slots__ = ("public_key", "sequence", "addresses", "signature")
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    public_key: bytes
    sequence: int
    addresses: _containers.RepeatedScalarFieldContainer[str]
    signature: bytes
    def __init__(self, public_key: _Optional[bytes] = ..., sequence: _Optional[int] = ..., addresses: _Optional[_Iterable[str]] = ..., signature: _Optional[bytes] = ...) -> None: ...

class RegisterHostResponse(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: HostRecord
    def __init__(self, host: _Optional[_Union[HostRecord, _Mapping]] = ...) -> None: ...

class ResolveHostRequest(_message.Message):
    __slots__ = ("identity",)
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    identity: str
    def __init__(self, identity: _Optional[str] = ...) -> None: ...

class ListHostsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListHostsResponse(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[HostRecord]
    def __init__(self, hosts: _Optional[_Iterable[_Union[HostRecord, _Mapping]]] = ...) -> None: ...

class HostRecord(_message.Message):
    __slots__ = ("identity", "addresses", "sequence", "registered_unix_ms", "expires_unix_ms")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    identity: str
    addresses: _containers.RepeatedScalarFieldContainer[str]
    sequence: int
    registered_unix_ms: int
    expires_unix_ms: int
    def __init__(self, identity: _Optional[str] = ..., addresses: _Optional[_Iterable[str]] = ..., sequence: _Optional[int] = ..., registered_unix_ms: _Optional[int] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...
