//! The Comch fast path through lanes (`Producer::lanes`, `Consumer::recv_lanes`): a
//! ping-pong and streams of messages both ways, in order, with the producer's id and the
//! immediate bytes; send lanes that find no buffer posted (DOCA's AGAIN) waiting in order
//! until one is, without spinning the executor; lanes dropped with operations waiting or in flight. (A module of
//! `tests/comch.rs`, whose runtime, bounds and names it shares.)

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_doca::comch::fast::{Consumer, Producer, Received};
use async_doca::comch::Connection;
use async_doca::executor::yield_now;
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, Result};
use futures_lite::future::poll_once;

use super::{bounded, inbox, pair, rt};

/// The immediate bytes of message `i`: 0 to 4 of them (0: sent with `submit`).
fn imm_of(i: u64) -> Vec<u8> {
    (0..i % 5).map(|k| (i as u8).wrapping_mul(7).wrapping_add(k as u8)).collect()
}

#[test]
fn a_ping_pong_through_lanes_both_ways() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "lanes-pingpong").await?;
        let (a_mem, b_mem) = (inbox(&dev, 2 * 8)?, inbox(&dev, 2 * 8)?);
        let a = Consumer::builder(&host, &a_mem).tasks(2).imm_data_len(4).build().await?;
        let b = Consumer::builder(&dpu, &b_mem).tasks(2).imm_data_len(4).build().await?;
        let (to_b, to_a) = (Producer::builder(&host).build().await?, Producer::builder(&dpu).build().await?);
        let (b_id, a_id) = (bounded(host.next_remote_consumer()).await??, bounded(dpu.next_remote_consumer()).await??);
        assert_eq!((a_id, b_id), (a.id(), b.id()));

        let (mut a_in, mut b_in) = (a.recv_lanes(a_mem.buf(), 2)?, b.recv_lanes(b_mem.buf(), 2)?);
        for _ in 0..2 {
            a_in.lane().await.1.submit();
            b_in.lane().await.1.submit();
        }
        let (a_out, b_out) = (dev.alloc(8, Access::LOCAL_READ_WRITE)?, dev.alloc(8, Access::LOCAL_READ_WRITE)?);
        let mut ping = to_b.lanes(a_out.buf(), 1, b_id)?;
        let mut pong = to_a.lanes(b_out.buf(), 1, a_id)?;
        assert_eq!((ping.depth(), ping.lane_len()), (1, 8));
        for round in 0..50u64 {
            let (prev, mut lane) = bounded(ping.lane()).await?;
            assert!(prev.is_none(), "the ping's result was taken");
            lane.write_u64(0, round);
            lane.submit_imm_bytes(&(round as u32).to_le_bytes());
            bounded(ping.next()).await?.expect("one submitted").0?;

            let (got, lane) = bounded(b_in.next()).await?.expect("two posted");
            let got: Received = got?;
            assert_eq!((got.len(), got.producer_id(), got.imm()), (8, to_b.id(), &(round as u32).to_le_bytes()[..]));
            assert_eq!(lane.buf().read_u64(0), round, "B's oldest lane holds round {round}");
            assert_eq!(lane.index(), round as usize % 2, "receive lanes fill in posting order");
            lane.submit();

            let (_, mut lane) = bounded(pong.lane()).await?;
            lane.write_u64(0, round + 1000);
            lane.submit();
            bounded(pong.next()).await?.expect("one submitted").0?;
            let (got, lane) = bounded(a_in.next()).await?.expect("two posted");
            let got = got?;
            assert_eq!((got.len(), got.producer_id(), got.imm()), (8, to_a.id(), &[][..]));
            assert_eq!(lane.buf().read_u64(0), round + 1000);
            lane.submit();
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// `n` messages from `from`'s producer through 4 send lanes into a consumer of `to` whose 8
/// receive lanes a spawned task takes and posts again: every message arrives once, in
/// order, with its bytes, the producer's id and its immediate bytes. The sender outruns the
/// receiver, so sends meet AGAIN and are tried again.
async fn stream(dev: &Device, from: &Connection, to: &Connection, n: u64) -> Result<()> {
    let mem = inbox(dev, 8 * 16)?;
    let consumer = Consumer::builder(to, &mem).tasks(8).imm_data_len(4).build().await?;
    let producer = Producer::builder(from).tasks(4).build().await?;
    let id = bounded(from.next_remote_consumer()).await??;
    assert_eq!(id, consumer.id());
    let receiver = spawn_local(async move {
        let mut lanes = consumer.recv_lanes(mem.buf(), 8)?;
        for _ in 0..8 {
            lanes.lane().await.1.submit();
        }
        let mut got = Vec::new();
        while (got.len() as u64) < n {
            let (r, lane) = lanes.next().await.expect("eight posted");
            let r = r?;
            got.push((r.len(), r.producer_id(), r.imm().to_vec(), lane.buf().read_u64(0), lane.buf().read_u64(8)));
            lane.submit();
        }
        Ok::<_, Error>(got)
    });
    let src = dev.alloc(4 * 16, Access::LOCAL_READ_WRITE)?;
    let mut lanes = producer.lanes(src.buf(), 4, id)?;
    let mut results = 0;
    for i in 0..n {
        let (prev, mut lane) = bounded(lanes.lane()).await?;
        if let Some(r) = prev {
            r?;
            results += 1;
        }
        lane.write_u64(0, i);
        lane.write_u64(8, !i);
        let imm = imm_of(i);
        if imm.is_empty() {
            lane.submit();
        } else {
            lane.submit_imm_bytes(&imm);
        }
    }
    while let Some((r, _)) = bounded(lanes.next()).await? {
        r?;
        results += 1;
    }
    assert_eq!(results, n, "one result per message");
    let got = bounded(receiver).await???;
    let want: Vec<_> = (0..n).map(|i| (16, producer.id(), imm_of(i), i, !i)).collect();
    assert_eq!(got, want, "every message, in order");
    Ok(())
}

#[test]
fn streams_of_messages_through_lanes_arrive_in_order_both_ways() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "lanes-stream").await?;
        stream(&dev, &dpu, &host, 500).await?;
        stream(&dev, &host, &dpu, 500).await?;
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Sends through lanes to a consumer with no buffer posted wait, past the yields into the
/// timed retries, without completing or failing; once buffers are posted they complete in
/// order, and the lanes still work afterwards.
#[test]
fn send_lanes_wait_for_posted_buffers_in_order() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "lanes-again").await?;
        let mem = inbox(&dev, 3 * 8)?;
        let consumer = Consumer::builder(&dpu, &mem).tasks(3).imm_data_len(1).build().await?;
        let producer = Producer::builder(&host).build().await?;
        let id = bounded(host.next_remote_consumer()).await??;
        let src = dev.alloc(3 * 8, Access::LOCAL_READ_WRITE)?;
        let mut sends = producer.lanes(src.buf(), 3, id)?;
        for i in 0..3u8 {
            let (prev, mut lane) = sends.lane().await;
            assert!(prev.is_none());
            lane.write_u64(0, u64::from(i) + 40);
            lane.submit_imm_bytes(&[i]);
        }
        // Polled again and again (more than the yields before timed retries), and left alone
        // for a while: nothing completes, nothing fails.
        for k in 0..300 {
            assert!(poll_once(sends.next()).await.is_none(), "a send completed with no buffer posted (poll {k})");
            yield_now().await;
        }
        // Awaited for 50 ms: the yields are spent, so the retries are timed (every
        // `SEND_RETRY`, 50 us: at most ~1 000 polls), not a spin of the executor (tens of
        // thousands of polls in that time).
        let polls = Cell::new(0u32);
        let mut next = sends.next();
        let counted = futures_lite::future::poll_fn(|cx| {
            polls.set(polls.get() + 1);
            Pin::new(&mut next).poll(cx)
        });
        assert!(timeout(Duration::from_millis(50), counted).await.is_err(), "a send completed with no buffer posted");
        assert!(polls.get() < 2_500, "{} polls in 50 ms: the lanes spin instead of waiting", polls.get());
        assert!(poll_once(sends.next()).await.is_none(), "a send completed with no buffer posted");
        assert_eq!(sends.len(), 3, "all three wait");

        let mut posted = consumer.recv_lanes(mem.buf(), 3)?;
        for _ in 0..3 {
            posted.lane().await.1.submit();
        }
        for _ in 0..3 {
            bounded(sends.next()).await?.expect("three submitted").0?;
        }
        assert!(sends.is_empty());
        for i in 0..3u8 {
            let (got, lane) = bounded(posted.next()).await?.expect("three posted");
            let got = got?;
            assert_eq!((got.imm(), lane.buf().read_u64(0)), (&[i][..], u64::from(i) + 40), "message {i}");
            lane.submit();
        }
        // The lanes go on: one more message each way round.
        let (_, mut lane) = sends.lane().await;
        lane.write_u64(0, 99);
        lane.submit();
        bounded(sends.next()).await?.expect("one submitted").0?;
        let (got, lane) = bounded(posted.next()).await?.expect("three posted");
        assert_eq!((got?.imm(), lane.buf().read_u64(0)), (&[][..], 99));
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Send lanes dropped while their sends wait for buffers send nothing afterwards; receive
/// lanes dropped with buffers posted leave them posted, and the memory alive, until sends
/// fill them; the contexts then stop cleanly when dropped.
#[test]
fn lanes_dropped_with_operations_waiting_or_in_flight() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "lanes-drop").await?;
        let mem = inbox(&dev, 4 * 8)?;
        let consumer = Consumer::builder(&host, &mem).tasks(4).build().await?;
        let producer = Producer::builder(&dpu).build().await?;
        let id = bounded(dpu.next_remote_consumer()).await??;
        let src = dev.alloc(2 * 8, Access::LOCAL_READ_WRITE)?;

        // Two sends waiting for buffers, dropped: they must not go out later.
        let mut sends = producer.lanes(src.buf(), 2, id)?;
        for v in [7u64, 8] {
            let (_, mut lane) = sends.lane().await;
            lane.write_u64(0, v);
            lane.submit();
        }
        assert!(poll_once(sends.next()).await.is_none(), "no buffer posted");
        drop(sends);

        // Two receive lanes posted over the first half of the memory, dropped with the memory's
        // last handle of ours.
        let mut posted = consumer.recv_lanes(mem.slice(..16), 2)?;
        for _ in 0..2 {
            posted.lane().await.1.submit();
        }
        drop(posted);
        // (Our other buffers of that memory keep it alive: that the lanes keep it too is a
        // unit test's, `comch::fast`'s, which can count its handles.)
        let (third, fourth) = (mem.slice(16..24), mem.slice(24..32));
        drop(mem);
        for _ in 0..100 {
            yield_now().await;
        }

        // The buffers the dropped lanes posted are still there, first in line: two sends fill
        // them, then a receive of ours gets the third message (the dropped sends never came).
        let out = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
        let mut msg = out.buf();
        for v in [1u64, 2] {
            msg.write_u64(0, v);
            let (r, back) = bounded(producer.send(msg, id, &[])).await?;
            r?;
            msg = back;
        }
        msg.write_u64(0, 3);
        let (sent, (got, buf)) =
            bounded(futures_lite::future::zip(producer.send(msg, id, &[]), consumer.recv(third))).await?;
        sent.0?;
        assert_eq!((got?.len(), buf.read_u64(0)), (8, 3), "the third message, after the two posted by the lanes");
        // Nothing else arrives: the dropped sends stayed dropped.
        let mut late = consumer.recv(fourth);
        for _ in 0..200 {
            assert!(poll_once(&mut late).await.is_none(), "a dropped send arrived");
            yield_now().await;
        }

        // A send lane dropped right after its submit (its completion not yet delivered), with
        // the memory's last handle of ours: the message still lands in the posted buffer.
        let mut sends = producer.lanes(src.slice(..8), 1, id)?;
        let (_, mut lane) = sends.lane().await;
        lane.write_u64(0, 77);
        lane.submit();
        drop(sends);
        drop(src);
        let (got, buf) = bounded(late).await?;
        assert_eq!((got?.len(), buf.read_u64(0)), (8, 77));
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
fn lanes_arguments_are_checked() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "lanes-args").await?;
        let mem = inbox(&dev, 64)?;
        let consumer = Consumer::builder(&host, &mem).build().await?;
        let producer = Producer::builder(&dpu).build().await?;
        let id = bounded(dpu.next_remote_consumer()).await??;
        let other = inbox(&dev, 64)?;
        let kind = |r: Result<()>| r.unwrap_err().kind();
        assert_eq!(kind(consumer.recv_lanes(other.buf(), 4).map(drop)), ErrorKind::InvalidArgument);
        assert_eq!(kind(consumer.recv_lanes(mem.slice(..30), 4).map(drop)), ErrorKind::InvalidArgument);
        assert_eq!(kind(consumer.recv_lanes(mem.buf(), 0).map(drop)), ErrorKind::InvalidArgument);
        assert_eq!(kind(producer.lanes(other.slice(..0), 1, id).map(drop)), ErrorKind::InvalidArgument);
        // A consumer that is not there: each send's result says so.
        let mut lanes = producer.lanes(other.slice(..8), 1, id + 1000)?;
        lanes.lane().await.1.submit();
        let (r, _) = bounded(lanes.next()).await?.expect("one submitted");
        assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);
        Ok::<_, Error>(())
    })
    .unwrap();
}
