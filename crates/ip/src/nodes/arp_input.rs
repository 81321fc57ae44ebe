//! `arp-input`: answer requests for our addresses, learn the senders that talk to us.

use crate::context::HasIp;
use crate::tables::l2_rewrite;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use std::net::IpAddr;
use wire::arp::{ArpOperation, ArpPacket, ArpRepr, PACKET_LEN};
use wire::{ethernet, EtherType};

next_nodes! {
    pub enum ArpInputNext { Output = "interface-output" }
}

counters! {
    pub enum ArpInputCounter {
        Malformed(Warn, "malformed", "truncated ARP, or not Ethernet/IPv4"),
        NotForUs(Info, "not-for-us", "target address is not ours (ignored)"),
        RepliesSent(Info, "replies-sent", "ARP replies sent for our addresses"),
        RateLimited(Warn, "rate-limited", "request for our address not answered: reply rate limit"),
        Learned(Info, "learned", "neighbours reported to the control plane"),
        LearnQueueFull(Warn, "learn-queue-full", "neighbour could not be reported: control queue full"),
        ReplyConsumed(Info, "reply-consumed", "ARP replies to us, consumed after learning"),
        UnknownOperation(Warn, "unknown-operation", "ARP operation neither request nor reply"),
        NoHeadroom(Error, "no-headroom", "no headroom to write the Ethernet header"),
    }
}

pub struct ArpInput;

impl<Cx: HasIp> Node<Cx> for ArpInput {
    type Next = ArpInputNext;
    type Counter = ArpInputCounter;
    const RECEIVES: engine::Receives = engine::Receives::EthernetPayload;

    fn name(&self) -> &'static str {
        "arp-input"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use ArpInputCounter as C;
        let Ok(p) = ArpPacket::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Malformed);
        };
        let Ok(r) = ArpRepr::parse(&p) else {
            return Verdict::Drop(C::Malformed);
        };
        let rx = buf.meta.rx_if;
        let Some(ifl) = cx.tables.interface(rx) else {
            return Verdict::Drop(C::Malformed);
        };
        if !ifl.has_ip4(r.target_ip) {
            return Verdict::Drop(C::NotForUs);
        }
        // Learn the sender when it talks to us and is not already known as it is.
        let known = cx.tables.neighbours4.get(&r.sender_ip).is_some_and(|n| n.mac == r.sender_hw && n.if_index == rx);
        if !known && !r.sender_ip.is_unspecified() && r.sender_hw.is_unicast() {
            if cx.learn(rx, IpAddr::V4(r.sender_ip), r.sender_hw) {
                counts.inc(C::Learned);
            } else {
                counts.inc(C::LearnQueueFull);
            }
        }
        match r.operation {
            ArpOperation::Request => {
                if !cx.arp_replies.take() {
                    return Verdict::Drop(C::RateLimited);
                }
                let reply = ArpRepr {
                    operation: ArpOperation::Reply,
                    sender_hw: ifl.mac,
                    sender_ip: r.target_ip,
                    target_hw: r.sender_hw,
                    target_ip: r.sender_ip,
                };
                let l2 = l2_rewrite(ifl, r.sender_hw, EtherType::Arp);
                reply.emit(&mut buf.bytes_mut()[..PACKET_LEN]);
                buf.truncate(PACKET_LEN);
                match buf.prepend(ethernet::HEADER_LEN) {
                    Ok(h) => h.copy_from_slice(&l2),
                    Err(_) => return Verdict::Drop(C::NoHeadroom),
                }
                buf.meta.tx_if = rx;
                counts.inc(C::RepliesSent);
                Verdict::Next(ArpInputNext::Output)
            }
            ArpOperation::Reply => Verdict::Drop(C::ReplyConsumed),
            ArpOperation::Unknown(_) => Verdict::Drop(C::UnknownOperation),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        match ArpPacket::new_checked(buf.bytes()).ok().and_then(|p| ArpRepr::parse(&p).ok()) {
            // tcpdump's words: a request asks who has the target, a reply says who is at it.
            Some(r) => match r.operation {
                ArpOperation::Request => format!("request who-has {} tell {} ({})", r.target_ip, r.sender_ip, r.sender_hw),
                ArpOperation::Reply => format!("reply {} is-at {} to {}", r.sender_ip, r.sender_hw, r.target_ip),
                ArpOperation::Unknown(n) => format!("operation {n} from {} ({}) about {}", r.sender_ip, r.sender_hw, r.target_ip),
            },
            None => "malformed ARP".into(),
        }
    }
}
