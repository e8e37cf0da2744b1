//! The result of a run: one JSON object (`--json`) or a readable summary.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::engine::Outcome;
use crate::metrics::{jain_fairness, CompletionSummary};
use crate::relays::{RelayEnd, RelaySite};
use crate::scenario::Direction;

/// Per-path counters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathReport {
    pub name: String,
    /// Packets the endpoints sent on the path, both directions, every client.
    pub sent_packets: u64,
    /// Of those, packets that carried retransmitted data.
    pub retransmitted_packets: u64,
    /// Share of the capacity in the workload's direction used over the run (mean over the clients' access links).
    pub utilization: f64,
    /// The path's relay where its own links end, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelayReport>,
    /// The path's relay beside the server, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_relay: Option<RelayReport>,
}

/// What a path's relay counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RelayReport {
    /// SECTIONs it forwarded, both directions.
    pub forwarded: u64,
    /// SECTIONs dropped because their direction's queue was full.
    pub queue_full: u64,
    /// Datagrams it dropped for any other reason.
    pub dropped: u64,
}

/// One flow of cross traffic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CrossFlowReport {
    pub cc: String,
    pub start_s: f64,
    /// From its start to the end of the run.
    pub goodput_mbps: f64,
    pub bytes_delivered: u64,
}

/// The workload between two moments at which the scenario's level changes: a cross-traffic flow starts, or a link's
/// random loss rate steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelReport {
    pub from_s: f64,
    pub to_s: f64,
    /// Cross-traffic flows running in this span.
    pub cross_flows: usize,
    /// The random loss rate the latest loss step set (the highest, where links step at once); absent before the
    /// first step and without steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub random_loss: Option<f64>,
    /// The workload's goodput in this span, summed over its clients.
    pub goodput_mbps: f64,
    /// The cross traffic's, summed over its flows.
    pub cross_goodput_mbps: f64,
}

/// One interval of the run (`tng-sim run --timeline MS`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// The interval's end.
    pub t_s: f64,
    /// The workload's goodput in the interval, summed over its clients.
    pub goodput_mbps: f64,
    pub cross_goodput_mbps: f64,
    /// The largest smoothed RTT of the data sender's channels at the interval's end (the server's, or the clients'
    /// in an upload), once one was measured.
    pub sender_srtt_ms: Option<f64>,
}

/// What the network did to packets, summed over every link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct NetworkReport {
    pub queue_drops: u64,
    pub random_drops: u64,
    pub outage_drops: u64,
    pub ecn_marks: u64,
    pub feedback_rewrites: u64,
    pub tail_drops: u64,
    /// Tail-drop candidates that had already arrived when their burst was sent in full (pattern not applied).
    pub tail_drops_missed: u64,
    /// Packets a tail-drop rule held back and then let go (they turned out not to be a burst's last).
    pub tail_holds_released: u64,
    pub unroutable: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub mode: String,
    pub seed: u64,
    /// Simulated seconds the run lasted.
    pub simulated_s: f64,
    /// Every planned transfer finished (always false for an unbounded bulk transfer).
    pub workload_completed: bool,
    /// Application goodput summed over clients, from `measure_after_s` to the end of the transfers.
    pub goodput_mbps: f64,
    pub client_goodput_mbps: Vec<f64>,
    pub jain_fairness: f64,
    pub fct_ms: CompletionSummary,
    pub burst_completion_ms: CompletionSummary,
    pub max_stall_ms: f64,
    pub app_bytes_sent: u64,
    pub app_bytes_delivered: u64,
    pub app_bytes_corrupted: u64,
    pub handshakes: u64,
    pub failed_connections: u64,
    pub failed_transfers: u64,
    pub paths: Vec<PathReport>,
    /// Cross traffic, if the scenario has any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross_traffic: Vec<CrossFlowReport>,
    /// With cross traffic: the workload's goodput from `measure_after_s` on, split where a cross flow starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<LevelReport>,
    /// With `--timeline MS`: the run interval by interval.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelinePoint>,
    pub network: NetworkReport,
    pub events: u64,
    /// Simulator speed in events per wall second (machine-dependent; absent in deterministic output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_sec: Option<f64>,
    /// Events per CPU second of the simulating thread from `measure_after_s` on: the cost of an event once the
    /// handshakes and slow starts are over (machine-dependent; absent in deterministic output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_events_per_cpu_sec: Option<f64>,
}

impl Report {
    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
    }

    /// A few readable lines.
    pub fn summary(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{} ({}, seed {}): {:.1} s simulated, workload {}",
            self.scenario,
            self.mode,
            self.seed,
            self.simulated_s,
            if self.workload_completed { "completed" } else { "not completed" }
        );
        let _ = writeln!(
            text,
            "  goodput        {:.2} Mbit/s (Jain fairness {:.3})",
            self.goodput_mbps, self.jain_fairness
        );
        if self.fct_ms.count > 0 {
            let f = &self.fct_ms;
            let _ = writeln!(
                text,
                "  flows          {} done, FCT mean {:.1} ms, p50 {:.1} ms, p99 {:.1} ms",
                f.count, f.mean, f.p50, f.p99
            );
        }
        if self.burst_completion_ms.count > 0 {
            let b = &self.burst_completion_ms;
            let _ = writeln!(
                text,
                "  bursts         {} done, completion mean {:.1} ms, p99 {:.1} ms",
                b.count, b.mean, b.p99
            );
        }
        let _ = writeln!(text, "  longest stall  {:.1} ms", self.max_stall_ms);
        let _ = writeln!(
            text,
            "  app bytes      {} sent, {} delivered, {} corrupted",
            self.app_bytes_sent, self.app_bytes_delivered, self.app_bytes_corrupted
        );
        for path in &self.paths {
            let _ = writeln!(
                text,
                "  path {:<10} {} packets sent, {} retransmitted, {:.1}% utilized",
                path.name,
                path.sent_packets,
                path.retransmitted_packets,
                path.utilization * 100.0
            );
            for (name, relay) in [("relay       ", &path.relay), ("server relay", &path.server_relay)] {
                if let Some(relay) = relay {
                    let _ = writeln!(
                        text,
                        "    {name} {} SECTIONs forwarded, {} dropped at a full queue, {} dropped otherwise",
                        relay.forwarded, relay.queue_full, relay.dropped
                    );
                }
            }
        }
        for flow in &self.cross_traffic {
            let _ = writeln!(
                text,
                "  cross traffic  {} from {:.1} s: {:.2} Mbit/s",
                flow.cc, flow.start_s, flow.goodput_mbps
            );
        }
        for level in &self.levels {
            let _ = writeln!(
                text,
                "  {:>5.1}-{:<5.1} s  {} cross flow(s){}: workload {:.2} Mbit/s, cross traffic {:.2} Mbit/s",
                level.from_s,
                level.to_s,
                level.cross_flows,
                level.random_loss.map(|loss| format!(", random loss {:.2} %", loss * 100.0)).unwrap_or_default(),
                level.goodput_mbps,
                level.cross_goodput_mbps
            );
        }
        let n = &self.network;
        let _ = writeln!(
            text,
            "  network        drops: {} queue, {} random, {} outage, {} tail ({} missed), {} unroutable; {} ECN marks",
            n.queue_drops, n.random_drops, n.outage_drops, n.tail_drops, n.tail_drops_missed, n.unroutable, n.ecn_marks
        );
        match self.events_per_sec {
            Some(rate) => {
                let _ = writeln!(text, "  simulator      {} events, {:.0} events/s", self.events, rate);
            }
            None => {
                let _ = writeln!(text, "  simulator      {} events", self.events);
            }
        }
        text
    }
}

/// Turns a run's outcome into its report; `include_speed` adds the machine-dependent speeds.
pub fn build_report(name: &str, outcome: &Outcome, include_speed: bool) -> Report {
    let ledger = &outcome.ledger;
    let client_goodput_mbps: Vec<f64> = ledger
        .goodput
        .iter()
        .zip(&ledger.finished_at)
        .map(|(meter, finished)| meter.mbps(finished.unwrap_or(outcome.ended_at)))
        .collect();
    let clients = outcome.scenario.clients;
    let paths = outcome
        .scenario
        .paths
        .iter()
        .enumerate()
        .map(|(index, path)| {
            let (sent_packets, retransmitted_packets) = outcome.path_packets.get(index).copied().unwrap_or_default();
            let utilization = (0..clients)
                .map(|client| {
                    let (uplink, downlink) = outcome.network.access_links(client, index);
                    let data_link = if outcome.scenario.direction == Direction::Upload { uplink } else { downlink };
                    data_link.utilization(outcome.ended_at)
                })
                .sum::<f64>()
                / clients as f64;
            let relay_at = |end| {
                let site = RelaySite { path: index, end };
                outcome.relay_stats.get(site.index()).copied().flatten().map(|stats| RelayReport {
                    forwarded: stats.forwarded,
                    queue_full: stats.queue_full,
                    dropped: stats.dropped,
                })
            };
            PathReport {
                name: path.name.clone(),
                sent_packets,
                retransmitted_packets,
                utilization,
                relay: relay_at(RelayEnd::Client),
                server_relay: relay_at(RelayEnd::Server),
            }
        })
        .collect();
    let links = outcome.network.total_link_stats();
    let tail = outcome.network.tail_drop_stats();
    let seconds = outcome.wall_time.as_secs_f64();
    Report {
        scenario: name.to_owned(),
        mode: outcome.scenario.mode.name().to_owned(),
        seed: outcome.scenario.seed,
        simulated_s: outcome.ended_at.as_secs_f64(),
        workload_completed: outcome.workload_completed,
        goodput_mbps: client_goodput_mbps.iter().sum(),
        jain_fairness: jain_fairness(&client_goodput_mbps),
        client_goodput_mbps,
        fct_ms: CompletionSummary::of(&ledger.flow_completion_times),
        burst_completion_ms: CompletionSummary::of(&ledger.burst_completion_times),
        max_stall_ms: ledger.stall.longest(outcome.ended_at).as_secs_f64() * 1000.0,
        app_bytes_sent: ledger.bytes_sent,
        app_bytes_delivered: ledger.bytes_delivered,
        app_bytes_corrupted: ledger.bytes_corrupted,
        handshakes: ledger.handshakes,
        failed_connections: ledger.failed_connections,
        failed_transfers: ledger.failed_transfers,
        paths,
        cross_traffic: cross_traffic_reports(outcome),
        levels: level_reports(outcome),
        timeline: timeline_points(outcome),
        network: NetworkReport {
            queue_drops: links.queue_drops,
            random_drops: links.random_drops,
            outage_drops: links.down_drops,
            ecn_marks: links.ecn_marks,
            feedback_rewrites: links.feedback_rewrites,
            tail_drops: tail.dropped,
            tail_drops_missed: tail.missed,
            tail_holds_released: tail.held_then_released,
            unroutable: outcome.network.routing_stats().unroutable,
        },
        events: outcome.events,
        events_per_sec: (include_speed && seconds > 0.0).then(|| outcome.events as f64 / seconds),
        steady_events_per_cpu_sec: outcome
            .steady_cost
            .filter(|cost| include_speed && !cost.cpu.is_zero())
            .map(|cost| cost.events as f64 / cost.cpu.as_secs_f64()),
    }
}

fn cross_traffic_reports(outcome: &Outcome) -> Vec<CrossFlowReport> {
    let ledger = &outcome.cross_ledger;
    outcome
        .cross_flows
        .iter()
        .enumerate()
        // A flow the run ended before never started (a shortened run: `--duration`).
        .filter(|(_, flow)| flow.start < outcome.ended_at)
        .map(|(index, flow)| CrossFlowReport {
            cc: flow.cc.to_string(),
            start_s: flow.start.as_secs_f64(),
            goodput_mbps: ledger.goodput[index].mbps(outcome.ended_at),
            bytes_delivered: ledger.goodput[index].bytes(),
        })
        .collect()
}

/// Spans between the start of measurement, every later cross-flow start or loss step and the end of the run.
fn level_reports(outcome: &Outcome) -> Vec<LevelReport> {
    if outcome.cross_flows.is_empty() && outcome.loss_steps.is_empty() {
        return Vec::new();
    }
    let measure_from = Duration::from_secs_f64(outcome.scenario.measure_after_s);
    let changes =
        outcome.cross_flows.iter().map(|flow| flow.start).chain(outcome.loss_steps.iter().map(|step| step.from));
    let mut bounds: Vec<Duration> = std::iter::once(measure_from)
        .chain(changes.filter(|&at| at > measure_from))
        .filter(|&at| at < outcome.ended_at)
        .collect();
    bounds.sort();
    bounds.dedup();
    bounds.push(outcome.ended_at);
    bounds
        .windows(2)
        .map(|span| LevelReport {
            from_s: span[0].as_secs_f64(),
            to_s: span[1].as_secs_f64(),
            cross_flows: outcome.cross_flows.iter().filter(|flow| flow.start <= span[0]).count(),
            random_loss: outcome.loss_steps.iter().rev().find(|step| step.from <= span[0]).map(|step| step.probability),
            goodput_mbps: outcome.ledger.timeline.mbps(span[0], span[1]),
            cross_goodput_mbps: outcome.cross_ledger.timeline.mbps(span[0], span[1]),
        })
        .collect()
}

fn timeline_points(outcome: &Outcome) -> Vec<TimelinePoint> {
    let Some((interval, srtts)) = &outcome.timeline else {
        return Vec::new();
    };
    srtts
        .iter()
        .enumerate()
        .map(|(index, srtt)| {
            let end = *interval * (index as u32 + 1);
            let start = end - *interval;
            TimelinePoint {
                t_s: end.as_secs_f64(),
                goodput_mbps: outcome.ledger.timeline.mbps(start, end),
                cross_goodput_mbps: outcome.cross_ledger.timeline.mbps(start, end),
                sender_srtt_ms: srtt.map(|srtt| srtt.as_secs_f64() * 1000.0),
            }
        })
        .collect()
}
