//! Emit → parse round trips for every IE and message the codec knows, and malformed input
//! answered with the right error (hence the right Cause and Offending IE).

use core::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use pfcp::grouped::*;
use pfcp::header::{Header, MessageType};
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::tlv::Ie;
use pfcp::{Cause, Error, Message};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;

fn v4() -> BoxedStrategy<Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from).boxed()
}
fn v6() -> BoxedStrategy<Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from).boxed()
}
fn flags<const T: u16, const MIN: usize>() -> BoxedStrategy<Flags<T, MIN>> {
    any::<u64>().prop_map(Flags).boxed()
}
fn node_id() -> BoxedStrategy<NodeId> {
    prop_oneof![v4().prop_map(NodeId::Ipv4), v6().prop_map(NodeId::Ipv6), vec(any::<u8>(), 1..40).prop_map(NodeId::Fqdn)].boxed()
}
fn f_seid() -> BoxedStrategy<FSeid> {
    (any::<u64>(), of(v4()), of(v6()))
        .prop_filter("an address", |(_, a, b)| a.is_some() || b.is_some())
        .prop_map(|(seid, ipv4, ipv6)| FSeid { seid, ipv4, ipv6 })
        .boxed()
}
fn f_teid() -> BoxedStrategy<FTeid> {
    prop_oneof![
        (any::<u32>(), of(v4()), of(v6()))
            .prop_filter("an address", |(_, a, b)| a.is_some() || b.is_some())
            .prop_map(|(teid, ipv4, ipv6)| FTeid::Assigned { teid, ipv4, ipv6 }),
        (any::<bool>(), any::<bool>(), of(any::<u8>()))
            .prop_filter("a family", |(a, b, _)| *a || *b)
            .prop_map(|(v4, v6, choose_id)| FTeid::Choose { v4, v6, choose_id }),
    ]
    .boxed()
}
fn ue_ip() -> BoxedStrategy<UeIpAddress> {
    (of(v4()), of(v6()), any::<bool>(), any::<bool>(), any::<bool>(), of(any::<u8>()), of(any::<u8>()))
        .prop_map(|(ipv4, ipv6, destination, choose_v4, choose_v6, v6_prefix_delegation_bits, v6_prefix_len)| UeIpAddress {
            ipv4,
            ipv6,
            destination,
            choose_v4,
            choose_v6,
            v6_prefix_delegation_bits,
            v6_prefix_len,
        })
        .boxed()
}
fn sdf() -> BoxedStrategy<SdfFilter> {
    (of(vec(any::<u8>(), 0..60)), of(any::<u16>()), of(any::<u32>()), of(0u32..1 << 20), of(any::<u32>()))
        .prop_map(|(flow_description, tos_traffic_class, spi, flow_label, filter_id)| SdfFilter {
            flow_description,
            tos_traffic_class,
            spi,
            flow_label,
            filter_id,
        })
        .boxed()
}
fn interface() -> BoxedStrategy<Interface> {
    (0u8..16).prop_map(Interface::from).boxed()
}
fn ohc() -> BoxedStrategy<OuterHeaderCreation> {
    (0u16..1 << 10, any::<u32>(), v4(), v6(), any::<u16>(), any::<[u8; 3]>(), any::<[u8; 3]>())
        .prop_map(|(d, teid, a4, a6, p, c, s)| {
            let has = |m: u16| d & m != 0;
            OuterHeaderCreation {
                description: d,
                teid: has(ohc::TEID).then_some(teid),
                ipv4: has(ohc::V4).then_some(a4),
                ipv6: has(ohc::V6).then_some(a6),
                port: has(ohc::PORT).then_some(p),
                c_tag: has(ohc::C_TAG).then_some(c),
                s_tag: has(ohc::S_TAG).then_some(s),
            }
        })
        .boxed()
}
fn ohr() -> BoxedStrategy<OuterHeaderRemoval> {
    (any::<u8>(), of(any::<u8>()))
        .prop_map(|(description, extension_deletion)| OuterHeaderRemoval { description, extension_deletion })
        .boxed()
}
fn volume<const T: u16>() -> BoxedStrategy<Volume<T>> {
    (of(any::<u64>()), of(any::<u64>()), of(any::<u64>())).prop_map(|(total, uplink, downlink)| Volume { total, uplink, downlink }).boxed()
}
fn volume_measurement() -> BoxedStrategy<VolumeMeasurement> {
    any::<[Option<u64>; 6]>()
        .prop_map(|v| VolumeMeasurement {
            total: v[0],
            uplink: v[1],
            downlink: v[2],
            total_packets: v[3],
            uplink_packets: v[4],
            downlink_packets: v[5],
        })
        .boxed()
}
fn bit_rate<const T: u16>() -> BoxedStrategy<BitRate<T>> {
    (0..=MAX_BIT_RATE_KBPS, 0..=MAX_BIT_RATE_KBPS).prop_map(|(ul_kbps, dl_kbps)| BitRate { ul_kbps, dl_kbps }).boxed()
}
fn gate() -> BoxedStrategy<GateStatus> {
    (any::<bool>(), any::<bool>()).prop_map(|(ul_closed, dl_closed)| GateStatus { ul_closed, dl_closed }).boxed()
}
fn cause() -> BoxedStrategy<CauseIe> {
    any::<u8>().prop_map(|c| CauseIe(c.into())).boxed()
}
fn failed_rule_id() -> BoxedStrategy<FailedRuleId> {
    prop_oneof![
        any::<u16>().prop_map(FailedRuleId::Pdr),
        any::<u32>().prop_map(FailedRuleId::Far),
        any::<u32>().prop_map(FailedRuleId::Qer),
        any::<u32>().prop_map(FailedRuleId::Urr),
        any::<u8>().prop_map(FailedRuleId::Bar),
    ]
    .boxed()
}
fn network_instance() -> BoxedStrategy<NetworkInstance> {
    vec(any::<u8>(), 0..30).prop_map(NetworkInstance).boxed()
}
fn pdi() -> BoxedStrategy<Pdi> {
    (interface(), of(f_teid()), of(network_instance()), of(ue_ip()), vec(sdf(), 0..3), vec((0u8..64).prop_map(Qfi), 0..3))
        .prop_map(|(si, f_teid, network_instance, ue_ip_address, sdf_filters, qfis)| Pdi {
            source_interface: Some(InterfaceIe(si)),
            f_teid,
            network_instance,
            ue_ip_address,
            sdf_filters,
            qfis,
        })
        .boxed()
}
fn pdr<const T: u16>(create: bool) -> BoxedStrategy<Pdr<T>> {
    (any::<u16>(), any::<u32>(), pdi(), of(ohr()), of(any::<u32>()), vec(any::<u32>(), 0..3), vec(any::<u32>(), 0..3), any::<[bool; 2]>())
        .prop_map(move |(id, prec, pdi, ohr, far, urrs, qers, opt)| Pdr {
            pdr_id: U16Ie(id),
            precedence: (create || opt[0]).then_some(U32Ie(prec)),
            pdi: (create || opt[1]).then_some(pdi),
            outer_header_removal: ohr,
            far_id: far.map(U32Ie),
            urr_ids: urrs.into_iter().map(U32Ie).collect(),
            qer_ids: qers.into_iter().map(U32Ie).collect(),
        })
        .boxed()
}
fn fwd<const T: u16>(create: bool) -> BoxedStrategy<ForwardingParams<T>> {
    (interface(), any::<bool>(), of(network_instance()), of(ohc()), of(flags()), of(any::<[u8; 2]>()))
        .prop_map(move |(di, has_di, ni, ohc, fl, tlm)| ForwardingParams {
            destination_interface: (create || has_di).then_some(InterfaceIe(di)),
            network_instance: ni,
            outer_header_creation: ohc,
            transport_level_marking: tlm.map(|[tos, mask]| TransportLevelMarking { tos, mask }),
            smreq_flags: if create { None } else { fl },
        })
        .boxed()
}
fn create_far() -> BoxedStrategy<CreateFar> {
    (any::<u32>(), flags(), of(fwd(true)), of(any::<u8>()))
        .prop_map(|(id, aa, fp, bar)| CreateFar { far_id: U32Ie(id), apply_action: aa, forwarding_parameters: fp, bar_id: bar.map(U8Ie) })
        .boxed()
}
fn update_far() -> BoxedStrategy<UpdateFar> {
    (any::<u32>(), of(flags()), of(fwd(false)), of(any::<u8>()))
        .prop_map(|(id, aa, fp, bar)| UpdateFar {
            far_id: U32Ie(id),
            apply_action: aa,
            update_forwarding_parameters: fp,
            bar_id: bar.map(U8Ie),
        })
        .boxed()
}
fn qer<const T: u16>(create: bool) -> BoxedStrategy<Qer<T>> {
    (any::<u32>(), gate(), any::<bool>(), of(bit_rate()), of(bit_rate()), of((0u8..64).prop_map(Qfi)))
        .prop_map(move |(id, g, has_g, mbr, gbr, qfi)| Qer {
            qer_id: U32Ie(id),
            gate_status: (create || has_g).then_some(g),
            mbr,
            gbr,
            qfi,
        })
        .boxed()
}
fn urr<const T: u16>(create: bool) -> BoxedStrategy<Urr<T>> {
    (any::<u32>(), flags(), flags(), any::<[bool; 2]>(), of(any::<u32>()), of(volume()), of(volume()), of(any::<u32>()), of(any::<u32>()))
        .prop_map(move |(id, mm, rt, opt, mp, vt, vq, tt, tq)| Urr {
            urr_id: U32Ie(id),
            measurement_method: (create || opt[0]).then_some(mm),
            reporting_triggers: (create || opt[1]).then_some(rt),
            measurement_period: mp.map(U32Ie),
            volume_threshold: vt,
            volume_quota: vq,
            time_threshold: tt.map(U32Ie),
            time_quota: tq.map(U32Ie),
        })
        .boxed()
}
fn created_pdr() -> BoxedStrategy<CreatedPdr> {
    (any::<u16>(), of(f_teid()), of(ue_ip()))
        .prop_map(|(id, f_teid, ue_ip_address)| CreatedPdr { pdr_id: U16Ie(id), f_teid, ue_ip_address })
        .boxed()
}
fn usage_report<const T: u16>() -> BoxedStrategy<UsageReport<T>> {
    (any::<u32>(), any::<u32>(), flags(), of(any::<u32>()), of(any::<u32>()), of(volume_measurement()), of(any::<u32>()))
        .prop_map(|(id, seqn, trig, st, et, vol, dur)| UsageReport {
            urr_id: U32Ie(id),
            ur_seqn: U32Ie(seqn),
            trigger: trig,
            start_time: st.map(U32Ie),
            end_time: et.map(U32Ie),
            volume: vol,
            duration: dur.map(U32Ie),
        })
        .boxed()
}

fn bar<const T: u16>() -> BoxedStrategy<Bar<T>> {
    (any::<u8>(), of(any::<u8>()), of(any::<u8>()))
        .prop_map(|(id, delay, count)| Bar {
            bar_id: U8Ie(id),
            dl_data_notification_delay: delay.map(U8Ie),
            suggested_buffering_packets_count: count.map(U8Ie),
        })
        .boxed()
}
fn dl_buffering_duration() -> BoxedStrategy<DlBufferingDuration> {
    (0u8..8, 0u8..32).prop_map(|(unit, value)| DlBufferingDuration { unit, value }).boxed()
}
fn update_bar_srr() -> BoxedStrategy<UpdateBarSrr> {
    (any::<u8>(), of(any::<u8>()), of(dl_buffering_duration()), of(any::<u16>()), of(any::<u8>()))
        .prop_map(|(id, delay, duration, dl_count, count)| UpdateBarSrr {
            bar_id: U8Ie(id),
            dl_data_notification_delay: delay.map(U8Ie),
            dl_buffering_duration: duration,
            dl_buffering_suggested_packet_count: dl_count.map(DlBufferingSuggestedPacketCount),
            suggested_buffering_packets_count: count.map(U8Ie),
        })
        .boxed()
}

fn ie_round_trips<T: Ie + PartialEq + core::fmt::Debug>(v: &T) {
    let b = v.to_bytes();
    assert_eq!(u16::from_be_bytes([b[0], b[1]]), T::TYPE);
    assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])), b.len() - 4);
    assert_eq!(&T::parse(&b[4..]).unwrap(), v);
    // Every truncation of the value either fails with a typed error or (for IEs whose tail
    // is optional) parses to something that emits no longer than the cut.
    for n in 0..b.len() - 4 {
        if let Ok(p) = T::parse(&b[4..4 + n]) {
            assert!(p.to_bytes().len() <= 4 + n, "{p:?} from {n} octets");
        }
    }
}

proptest! {
    #[test]
    fn leaf_ies_round_trip(
        n in node_id(), s in f_seid(), t in f_teid(), u in ue_ip(), f in sdf(), c in cause(), i in interface(),
        o in ohc(), r in ohr(), vt in volume::<{ pfcp::ie::ty::VOLUME_THRESHOLD }>(), vq in volume::<{ pfcp::ie::ty::VOLUME_QUOTA }>(),
        vm in volume_measurement(), m in bit_rate::<{ pfcp::ie::ty::MBR }>(), g in bit_rate::<{ pfcp::ie::ty::GBR }>(), gs in gate(),
        ni in network_instance(), q in 0u8..64, x in any::<u32>(), y in any::<u16>(), z in any::<u8>(),
        aa in flags::<{ pfcp::ie::ty::APPLY_ACTION }, 1>(), rt in flags::<{ pfcp::ie::ty::REPORTING_TRIGGERS }, 2>(),
        urt in flags::<{ pfcp::ie::ty::USAGE_REPORT_TRIGGER }, 2>(), upf in flags::<{ pfcp::ie::ty::UP_FUNCTION_FEATURES }, 2>(),
    ) {
        ie_round_trips(&n); ie_round_trips(&s); ie_round_trips(&t); ie_round_trips(&u); ie_round_trips(&f);
        ie_round_trips(&c); ie_round_trips(&SourceInterface::from(InterfaceIe(i)));
        ie_round_trips(&DestinationInterface::from(InterfaceIe(i))); ie_round_trips(&o); ie_round_trips(&r);
        ie_round_trips(&vt); ie_round_trips(&vq); ie_round_trips(&vm); ie_round_trips(&m); ie_round_trips(&g);
        ie_round_trips(&gs); ie_round_trips(&ni); ie_round_trips(&Qfi(q)); ie_round_trips(&aa); ie_round_trips(&rt);
        ie_round_trips(&urt); ie_round_trips(&upf);
        ie_round_trips(&PdrId::from(U16Ie(y))); ie_round_trips(&FarId::from(U32Ie(x))); ie_round_trips(&QerId::from(U32Ie(x)));
        ie_round_trips(&UrrId::from(U32Ie(x))); ie_round_trips(&BarId::from(U8Ie(z))); ie_round_trips(&Precedence::from(U32Ie(x)));
        ie_round_trips(&RecoveryTimeStamp::from(U32Ie(x))); ie_round_trips(&TimeThreshold::from(U32Ie(x)));
        ie_round_trips(&TimeQuota::from(U32Ie(x))); ie_round_trips(&MeasurementPeriod::from(U32Ie(x)));
        ie_round_trips(&OffendingIe::from(U16Ie(y))); ie_round_trips(&UrSeqn::from(U32Ie(x)));
        ie_round_trips(&MeasurementMethod::from(Flags(u64::from(z))));
        ie_round_trips(&ReportType::from(Flags(u64::from(z))));
        ie_round_trips(&DlDataNotificationDelay::from(U8Ie(z))); ie_round_trips(&SuggestedBufferingPacketsCount::from(U8Ie(z)));
        ie_round_trips(&DlBufferingSuggestedPacketCount(y)); ie_round_trips(&SrRspFlags::from(Flags(u64::from(z))));
    }

    #[test]
    fn dl_buffering_duration_round_trips_and_reads_its_units(d in dl_buffering_duration()) {
        ie_round_trips(&d);
        let v = u64::from(d.value);
        let want = match d.unit {
            0 if v == 0 => BufferingTime::Stopped,
            7 => BufferingTime::Infinite,
            0 => BufferingTime::For(Duration::from_secs(2 * v)),
            2 => BufferingTime::For(Duration::from_secs(600 * v)),
            3 => BufferingTime::For(Duration::from_secs(3600 * v)),
            4 => BufferingTime::For(Duration::from_secs(36_000 * v)),
            _ => BufferingTime::For(Duration::from_secs(60 * v)),
        };
        prop_assert_eq!(d.time(), want);
    }

    #[test]
    fn grouped_ies_round_trip(
        p in pdi(), cp in pdr::<{ pfcp::ie::ty::CREATE_PDR }>(true), up in pdr::<{ pfcp::ie::ty::UPDATE_PDR }>(false),
        cf in create_far(), uf in update_far(), cq in qer::<{ pfcp::ie::ty::CREATE_QER }>(true), uq in qer::<{ pfcp::ie::ty::UPDATE_QER }>(false),
        cu in urr::<{ pfcp::ie::ty::CREATE_URR }>(true), uu in urr::<{ pfcp::ie::ty::UPDATE_URR }>(false), cr in created_pdr(),
        ur in usage_report::<{ pfcp::ie::ty::USAGE_REPORT_SRR }>(), id in any::<u32>(), pid in any::<u16>(),
        cb in bar::<{ pfcp::ie::ty::CREATE_BAR }>(), ub in bar::<{ pfcp::ie::ty::UPDATE_BAR_SMR }>(), ubs in update_bar_srr(),
    ) {
        ie_round_trips(&p); ie_round_trips(&cp); ie_round_trips(&up); ie_round_trips(&cf); ie_round_trips(&uf);
        ie_round_trips(&cq); ie_round_trips(&uq); ie_round_trips(&cu); ie_round_trips(&uu); ie_round_trips(&cr);
        ie_round_trips(&ur); ie_round_trips(&RemovePdr::from(Remove(U16Ie(pid)))); ie_round_trips(&RemoveFar::from(Remove(U32Ie(id))));
        ie_round_trips(&RemoveQer::from(Remove(U32Ie(id)))); ie_round_trips(&RemoveUrr::from(Remove(U32Ie(id))));
        ie_round_trips(&DownlinkDataReport { pdr_ids: vec![U16Ie(pid), U16Ie(pid ^ 1)] });
        ie_round_trips(&cb); ie_round_trips(&ub); ie_round_trips(&ubs); ie_round_trips(&RemoveBar::from(Remove(U8Ie(pid as u8))));
    }

    #[test]
    fn messages_round_trip(m in message(), seid in any::<u64>(), seq in 0u32..1 << 24, prio in of(0u8..16)) {
        let h = Header {
            msg_type: m.msg_type(),
            seid: m.msg_type().is_session().then_some(seid),
            seq,
            priority: prio,
            follow_on: false,
        };
        let b = m.to_bytes(&h);
        let (h2, m2) = Message::parse(&b).unwrap();
        prop_assert_eq!(h2, h);
        prop_assert_eq!(&m2, &m);
        // No prefix of a message parses (the length field covers it all).
        for n in 0..b.len() {
            prop_assert!(Message::parse(&b[..n]).is_err());
        }
    }
}

fn ids<const T: u16, const I: u16>() -> BoxedStrategy<Vec<Remove<T, U32Ie<I>>>> {
    vec(any::<u32>().prop_map(|i| Remove(U32Ie(i))), 0..2).boxed()
}

fn message() -> BoxedStrategy<Message> {
    let assoc_req = || {
        (node_id(), of(any::<u32>()), of(flags()), of(flags())).prop_map(|(node_id, r, up, cp)| AssociationRequest {
            node_id,
            recovery_time_stamp: r.map(U32Ie),
            up_function_features: up,
            cp_function_features: cp,
        })
    };
    let assoc_resp = || {
        (node_id(), cause(), of(any::<u32>()), of(flags()), of(flags())).prop_map(|(node_id, cause, r, up, cp)| AssociationResponse {
            node_id,
            cause,
            recovery_time_stamp: r.map(U32Ie),
            up_function_features: up,
            cp_function_features: cp,
        })
    };
    let ser = (
        node_id(),
        f_seid(),
        vec(pdr(true), 1..3),
        vec(create_far(), 1..3),
        vec(urr(true), 0..2),
        vec(qer(true), 0..2),
        of(bar()),
        of(any::<u8>()),
    )
        .prop_map(|(node_id, cp_f_seid, create_pdr, create_far, create_urr, create_qer, create_bar, pdn)| {
            SessionEstablishmentRequest {
                node_id,
                cp_f_seid,
                create_pdr,
                create_far,
                create_urr,
                create_qer,
                create_bar,
                pdn_type: pdn.map(U8Ie),
            }
        });
    let sers = (node_id(), cause(), of(any::<u16>()), of(f_seid()), vec(created_pdr(), 0..3), of(failed_rule_id())).prop_map(
        |(node_id, cause, off, f, cr, failed_rule_id)| SessionEstablishmentResponse {
            node_id,
            cause,
            offending_ie: off.map(U16Ie),
            up_f_seid: f,
            created_pdr: cr,
            failed_rule_id,
        },
    );
    let smr = (
        of(f_seid()),
        vec(any::<u16>().prop_map(|i| Remove(U16Ie(i))), 0..2),
        ids(),
        ids(),
        ids(),
        (vec(pdr(true), 0..2), vec(create_far(), 0..2), vec(urr(true), 0..2), vec(qer(true), 0..2)),
        (vec(pdr(false), 0..2), vec(update_far(), 0..2), vec(urr(false), 0..2), vec(qer(false), 0..2)),
        ids(),
        of(flags()),
        (of(any::<u8>()), of(bar()), of(bar())),
    )
        .prop_map(|(cp_f_seid, remove_pdr, remove_far, remove_urr, remove_qer, c, u, query_urr, flags, b)| {
            SessionModificationRequest {
                cp_f_seid,
                remove_pdr,
                remove_far,
                remove_urr,
                remove_qer,
                create_pdr: c.0,
                create_far: c.1,
                create_urr: c.2,
                create_qer: c.3,
                update_pdr: u.0,
                update_far: u.1,
                update_urr: u.2,
                update_qer: u.3,
                query_urr,
                flags,
                remove_bar: b.0.map(|i| Remove(U8Ie(i))),
                create_bar: b.1,
                update_bar: b.2,
            }
        });
    let smrs = (cause(), of(any::<u16>()), vec(created_pdr(), 0..2), vec(usage_report(), 0..2), of(failed_rule_id())).prop_map(
        |(cause, off, cr, ur, failed_rule_id)| SessionModificationResponse {
            cause,
            offending_ie: off.map(U16Ie),
            created_pdr: cr,
            usage_report: ur,
            failed_rule_id,
        },
    );
    let sdrs = (cause(), of(any::<u16>()), vec(usage_report(), 0..2)).prop_map(|(cause, off, ur)| SessionDeletionResponse {
        cause,
        offending_ie: off.map(U16Ie),
        usage_report: ur,
    });
    let srr = (flags(), of(vec(any::<u16>().prop_map(U16Ie), 1..3)), vec(usage_report(), 0..2)).prop_map(|(rt, dl, ur)| {
        SessionReportRequest { report_type: rt, downlink_data_report: dl.map(|pdr_ids| DownlinkDataReport { pdr_ids }), usage_report: ur }
    });
    let srrs = (cause(), of(any::<u16>()), of(update_bar_srr()), of(flags()))
        .prop_map(|(cause, off, update_bar, flags)| SessionReportResponse { cause, offending_ie: off.map(U16Ie), update_bar, flags });
    let hb = any::<u32>().prop_map(|r| Heartbeat { recovery_time_stamp: U32Ie(r) });
    prop_oneof![
        hb.clone().prop_map(Message::HeartbeatRequest),
        hb.prop_map(Message::HeartbeatResponse),
        assoc_req().prop_map(|mut r| {
            r.recovery_time_stamp.get_or_insert(U32Ie(7));
            Message::AssociationSetupRequest(r)
        }),
        assoc_req().prop_map(Message::AssociationUpdateRequest),
        assoc_resp().prop_map(|mut r| {
            r.recovery_time_stamp.get_or_insert(U32Ie(7));
            Message::AssociationSetupResponse(r)
        }),
        assoc_resp().prop_map(Message::AssociationUpdateResponse),
        assoc_resp().prop_map(Message::AssociationReleaseResponse),
        node_id().prop_map(|node_id| Message::AssociationReleaseRequest(AssociationReleaseRequest { node_id })),
        Just(Message::VersionNotSupportedResponse),
        ser.prop_map(Message::SessionEstablishmentRequest),
        sers.prop_map(Message::SessionEstablishmentResponse),
        smr.prop_map(Message::SessionModificationRequest),
        smrs.prop_map(Message::SessionModificationResponse),
        Just(Message::SessionDeletionRequest),
        sdrs.prop_map(Message::SessionDeletionResponse),
        srr.prop_map(Message::SessionReportRequest),
        srrs.prop_map(Message::SessionReportResponse),
    ]
    .boxed()
}

fn establishment() -> Vec<u8> {
    let smf = Ipv4Addr::new(198, 18, 7, 1);
    let m = Message::SessionEstablishmentRequest(SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(smf),
        cp_f_seid: FSeid { seid: 0x1111, ipv4: Some(smf), ipv6: None },
        create_pdr: vec![CreatePdr {
            pdr_id: U16Ie(1),
            precedence: Some(U32Ie(255)),
            pdi: Some(Pdi { source_interface: Some(InterfaceIe(Interface::Access)), ..Default::default() }),
            outer_header_removal: None,
            far_id: Some(U32Ie(1)),
            urr_ids: vec![],
            qer_ids: vec![],
        }],
        create_far: vec![CreateFar {
            far_id: U32Ie(1),
            apply_action: Flags(apply_action::FORW),
            forwarding_parameters: None,
            bar_id: None,
        }],
        create_urr: vec![],
        create_qer: vec![],
        create_bar: None,
        pdn_type: None,
    });
    m.to_bytes(&Header::session(MessageType::SessionEstablishmentRequest, 0, 1))
}

/// Removes the first IE of type `ty` found at message level (after the 16-octet header).
fn without_ie(b: &[u8], ty: u16) -> Vec<u8> {
    let mut at = 16;
    while at + 4 <= b.len() {
        let t = u16::from_be_bytes([b[at], b[at + 1]]);
        let len = usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
        if t == ty {
            let mut out = [&b[..at], &b[at + 4 + len..]].concat();
            let l = (out.len() - 4) as u16;
            out[2..4].copy_from_slice(&l.to_be_bytes());
            return out;
        }
        at += 4 + len;
    }
    panic!("no IE {ty}");
}

#[test]
fn missing_mandatory_ies_name_cause_and_offender() {
    let b = establishment();
    assert!(Message::parse(&b).is_ok());
    for ty in [pfcp::ie::ty::NODE_ID, pfcp::ie::ty::F_SEID, pfcp::ie::ty::CREATE_PDR, pfcp::ie::ty::CREATE_FAR] {
        let e = Message::parse(&without_ie(&b, ty)).unwrap_err();
        assert_eq!(e, Error::MandatoryMissing(ty));
        assert_eq!((e.cause(), e.offending_ie()), (Cause::MandatoryIeMissing, Some(ty)));
    }
}

#[test]
fn missing_child_of_a_grouped_ie_is_named() {
    // A Create PDR without its PDI's Source Interface.
    let mut v = Vec::new();
    PdrId::from(U16Ie(1)).emit(&mut v);
    Precedence::from(U32Ie(1)).emit(&mut v);
    v.extend_from_slice(&[0, 2, 0, 0]); // empty PDI
    assert_eq!(CreatePdr::parse(&v), Err(Error::MandatoryMissing(pfcp::ie::ty::SOURCE_INTERFACE)));
}

#[test]
fn bad_lengths_are_invalid_length_of_that_ie() {
    let b = establishment();
    // The Node ID IE (first, at 16) claims 1 octet more than the message holds.
    let mut long = b.clone();
    let l = u16::from_be_bytes([long[18], long[19]]) + 200;
    long[18..20].copy_from_slice(&l.to_be_bytes());
    let e = Message::parse(&long).unwrap_err();
    assert_eq!((e.cause(), e.offending_ie()), (Cause::InvalidLength, Some(pfcp::ie::ty::NODE_ID)));
    // An F-SEID too short for its SEID.
    assert_eq!(FSeid::parse(&[2, 0, 0, 0]), Err(Error::InvalidLength(pfcp::ie::ty::F_SEID)));
    // An F-TEID whose V4 flag promises an address that is not there.
    assert_eq!(FTeid::parse(&[1, 0, 0, 0, 1]), Err(Error::InvalidLength(pfcp::ie::ty::F_TEID)));
    // An SDF filter whose flow-description length runs past the IE.
    assert_eq!(SdfFilter::parse(&[1, 0, 0, 9, b'p']), Err(Error::InvalidLength(pfcp::ie::ty::SDF_FILTER)));
}

#[test]
fn incorrect_values_are_named() {
    assert_eq!(FTeid::parse(&[0, 0, 0, 0, 1]), Err(Error::Incorrect(pfcp::ie::ty::F_TEID))); // neither V4 nor V6
    assert_eq!(FTeid::parse(&[8 | 1, 0, 0, 0, 1, 1, 2, 3, 4]), Err(Error::Incorrect(pfcp::ie::ty::F_TEID))); // CHID without CH
    assert_eq!(GateStatus::parse(&[2]), Err(Error::Incorrect(pfcp::ie::ty::GATE_STATUS)));
    assert_eq!(NodeId::parse(&[5, 1, 2, 3, 4]), Err(Error::Incorrect(pfcp::ie::ty::NODE_ID)));
    assert_eq!(Error::Incorrect(pfcp::ie::ty::NODE_ID).cause(), Cause::MandatoryIeIncorrect);
}

#[test]
fn unknown_and_vendor_ies_are_skipped() {
    let mut b = establishment();
    // Append an unknown IE (type 999) and a vendor IE (0x8123, enterprise 0x1234).
    b.extend_from_slice(&[0x03, 0xe7, 0, 2, 0xaa, 0xbb, 0x81, 0x23, 0, 3, 0x12, 0x34, 0x01]);
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    let (_, m) = Message::parse(&b).unwrap();
    assert_eq!(m, Message::parse(&establishment()).unwrap().1);
}

#[test]
fn repeated_single_ie_keeps_the_first() {
    let mut b = establishment();
    let mut node = Vec::new();
    NodeId::Ipv4(Ipv4Addr::new(198, 18, 9, 9)).emit(&mut node);
    b.extend_from_slice(&node);
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    let Message::SessionEstablishmentRequest(m) = Message::parse(&b).unwrap().1 else { panic!() };
    assert_eq!(m.node_id, NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)));
}

#[test]
fn flags_accept_longer_values_and_emit_the_minimum() {
    assert_eq!(ApplyAction::parse(&[2, 0, 0]), Ok(Flags(apply_action::FORW)));
    assert_eq!(ApplyAction::from(Flags(apply_action::FORW)).to_bytes(), vec![0, 44, 0, 1, 2]);
    assert_eq!(ReportingTriggers::parse(&[1]), Err(Error::InvalidLength(pfcp::ie::ty::REPORTING_TRIGGERS)));
    let up = UpFunctionFeatures::from(Flags(up_features::FTUP | up_features::UEIP | up_features::EMPU));
    assert_eq!(up.to_bytes(), vec![0, 43, 0, 3, 0x10, 0x01, 0x04]);
}

/// Failed Rule ID (§8.2.80): the Rule ID Type in the low 5 bits of its first octet (PDR 0,
/// FAR 1, QER 2, URR 3, BAR 4), then the rule's id at its own width.
#[test]
fn failed_rule_id_octets() {
    assert_eq!(FailedRuleId::Pdr(0x0102).to_bytes(), vec![0, 114, 0, 3, 0, 1, 2]);
    assert_eq!(FailedRuleId::Far(7).to_bytes(), vec![0, 114, 0, 5, 1, 0, 0, 0, 7]);
    assert_eq!(FailedRuleId::Qer(8).to_bytes(), vec![0, 114, 0, 5, 2, 0, 0, 0, 8]);
    assert_eq!(FailedRuleId::Urr(9).to_bytes(), vec![0, 114, 0, 5, 3, 0, 0, 0, 9]);
    assert_eq!(FailedRuleId::Bar(3).to_bytes(), vec![0, 114, 0, 2, 4, 3]);
    // The spare bits above the type are not read; an id cut short or an unknown type is not
    // a rule.
    assert_eq!(FailedRuleId::parse(&[0xe0, 0, 5]), Ok(FailedRuleId::Pdr(5)));
    assert_eq!(FailedRuleId::parse(&[1, 0, 5]), Err(Error::InvalidLength(ty::FAILED_RULE_ID)));
    assert_eq!(FailedRuleId::parse(&[5, 0, 0, 0, 1]), Err(Error::Incorrect(ty::FAILED_RULE_ID)));
}
