//! The agenda's lanes: one heap entry per link that delivers in order, and the same event order as one entry per
//! packet.

use std::net::SocketAddr;
use std::time::Duration;

use tng_sim::datagram::{Datagram, Ecn};
use tng_sim::event_queue::EventQueue;
use tng_sim::link::{Fate, Link, LinkParams};
use tng_sim::rng::SimRng;

fn datagram(len: usize) -> Datagram {
    let address: SocketAddr = "10.0.0.1:4477".parse().expect("valid address");
    Datagram { source: address, destination: address, ecn: Ecn::NotEct, payload: vec![0; len] }
}

fn arrival(fate: Fate) -> Duration {
    match fate {
        Fate::Arrives { at, .. } => at,
        Fate::Dropped(cause) => panic!("unexpectedly dropped: {cause:?}"),
    }
}

/// Events name a link and a packet's index on it.
type Agenda = EventQueue<(usize, u64)>;

/// Sends `packets` datagrams over each link, interleaved, one every 50 us, and schedules every arrival both in the
/// link's lane of one agenda and as a plain event of another: returns (laned, plain).
fn schedule_arrivals(links: &mut [Link], packets: u64) -> (Agenda, Agenda) {
    let mut laned = EventQueue::new();
    let mut plain = EventQueue::new();
    for index in 0..packets {
        for (lane, link) in links.iter_mut().enumerate() {
            let at = arrival(link.transmit(Duration::from_micros(index * 50), &mut datagram(1200)));
            laned.schedule_in_lane(lane, at, (lane, index));
            plain.schedule(at, (lane, index));
        }
    }
    (laned, plain)
}

fn drain(queue: &mut Agenda) -> Vec<(Duration, (usize, u64))> {
    std::iter::from_fn(|| queue.pop()).collect()
}

#[test]
fn an_in_order_link_holds_one_heap_entry_whatever_it_carries() {
    let mut jittered = LinkParams::constant_rate(50_000_000, Duration::from_millis(10));
    jittered.jitter = Duration::from_millis(3);
    let mut links = [
        Link::new(LinkParams::constant_rate(20_000_000, Duration::from_millis(5)), SimRng::for_component(1, "a")),
        Link::new(jittered, SimRng::for_component(1, "b")),
    ];
    let (mut laned, mut plain) = schedule_arrivals(&mut links, 100);
    assert_eq!(laned.heap_entries(), 2);
    assert_eq!(laned.len(), 200);
    assert_eq!(plain.heap_entries(), 200);

    let delivered = drain(&mut laned);
    assert_eq!(delivered, drain(&mut plain), "lanes changed the delivery order or times");
    assert!(laned.is_empty() && laned.heap_entries() == 0);
    for lane in 0..2 {
        let order: Vec<u64> = delivered.iter().filter(|(_, (l, _))| *l == lane).map(|(_, (_, i))| *i).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>(), "link {lane} delivered out of order");
    }
}

#[test]
fn a_reordering_link_gives_overtaking_packets_their_own_entries_and_keeps_the_order() {
    let mut params = LinkParams::constant_rate(100_000_000, Duration::from_millis(10));
    params.jitter = Duration::from_millis(5);
    params.reorder = true;
    let mut links = [Link::new(params, SimRng::for_component(3, "reordering"))];
    let (mut laned, mut plain) = schedule_arrivals(&mut links, 200);
    assert!(laned.heap_entries() > 1, "no packet overtook another: the test proves nothing");
    assert!(laned.heap_entries() < 200);
    assert_eq!(laned.len(), 200);
    assert_eq!(drain(&mut laned), drain(&mut plain));
}

#[test]
fn lanes_keep_the_plain_order_with_ties_and_interleaved_pops() {
    // Times on a 1 ms grid make ties common; lanes get mostly, not always, non-decreasing times.
    let mut rng = SimRng::for_component(11, "agenda-fuzz");
    let mut laned = EventQueue::new();
    let mut plain = EventQueue::new();
    let mut now = Duration::ZERO;
    let mut popped = 0;
    for event in 0..20_000u64 {
        if rng.unit() < 0.45 {
            if let (Some(a), Some(b)) = (laned.pop(), plain.pop()) {
                assert_eq!(a, b, "pop {popped} differs");
                now = a.0;
                popped += 1;
            }
            continue;
        }
        let at = now + Duration::from_millis(rng.next_u64() % 8);
        let lane = rng.next_u64() % 6;
        if lane == 5 {
            laned.schedule(at, event);
        } else {
            laned.schedule_in_lane(lane as usize, at, event);
        }
        plain.schedule(at, event);
        assert_eq!(laned.len(), plain.len());
        assert_eq!(laned.peek_time(), plain.peek_time());
    }
    assert!(popped > 5000);
    assert!(laned.heap_entries() < plain.heap_entries());
    let rest: Vec<_> = std::iter::from_fn(|| laned.pop()).collect();
    assert_eq!(rest, std::iter::from_fn(|| plain.pop()).collect::<Vec<_>>());
}
