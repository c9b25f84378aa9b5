//! The Comch fast path as futures (`async_doca::comch::fast`): consumers announced to the
//! peer, sends landing in posted buffers in posting order with the producer's id and the
//! immediate bytes, a send that waits for a buffer to be posted, both directions, the
//! argument checks, and a consumer that goes away. (A module of `tests/comch.rs`, whose
//! runtime, bounds and names it shares.)

use std::cell::Cell;
use std::rc::Rc;

use async_doca::comch::fast::{Consumer, Producer, MAX_IMM_DATA};
use async_doca::executor::yield_now;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind};

use super::{bounded, inbox, pair, rt};

#[test]
fn sends_land_in_posted_buffers_in_order_with_the_producer_id_and_immediates() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-order").await?;
        let mem = inbox(&dev, 4 * 256)?;
        let consumer = Consumer::builder(&host, &mem).tasks(8).imm_data_len(MAX_IMM_DATA as u32).build().await?;
        let producer = Producer::builder(&dpu).build().await?;
        let id = bounded(dpu.next_remote_consumer()).await??;
        assert_eq!(id, consumer.id());
        assert_eq!(dpu.remote_consumers(), vec![id]);

        // Four buffers posted in order (spawned tasks run in spawn order).
        let posted: Vec<_> = (0..4)
            .map(|i| {
                let (c, buf) = (consumer.clone(), mem.slice(i * 256..(i + 1) * 256));
                spawn_local(async move {
                    let (r, buf) = c.recv(buf).await;
                    r.map(|got| (got, buf.to_vec()))
                })
            })
            .collect();
        yield_now().await;
        let src = dev.alloc(256, Access::LOCAL_READ_WRITE)?;
        for i in 0..4u8 {
            let mut msg = src.slice(..usize::from(i) * 10 + 1);
            msg.fill(b'a' + i);
            let imm: Vec<u8> = (0..=i).map(|k| k * 3).collect();
            let (r, _) = bounded(producer.send(msg, id, &imm)).await?;
            r?;
        }
        for (i, p) in posted.into_iter().enumerate() {
            let (got, bytes) = bounded(p).await???;
            let n = i * 10 + 1;
            assert_eq!(got.len(), n, "buffer {i}");
            assert_eq!(got.producer_id(), producer.id());
            assert_eq!(got.imm(), (0..=i as u8).map(|k| k * 3).collect::<Vec<_>>().as_slice());
            assert!(bytes[..n].iter().all(|&b| b == b'a' + i as u8), "buffer {i} holds message {i}");
            assert!(bytes[n..].iter().all(|&b| b == 0), "nothing past the message");
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// A send to a consumer with no buffer posted waits (DOCA's AGAIN, tried again) and
/// completes once one is; here the consumer is on the server and the producer on the client.
#[test]
fn a_send_waits_for_a_posted_buffer_in_the_other_direction() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-wait").await?;
        let mem = inbox(&dev, 64)?;
        let consumer = Consumer::builder(&dpu, &mem).build().await?;
        let producer = Producer::builder(&host).build().await?;
        let id = bounded(host.next_remote_consumer()).await??;
        let done = Rc::new(Cell::new(false));
        let send = spawn_local({
            let (producer, done, dev) = (producer.clone(), done.clone(), dev.clone());
            async move {
                let mut msg = dev.alloc(16, Access::LOCAL_READ_WRITE)?.slice(..3);
                msg.write(0, b"abc");
                let (r, _) = producer.send(msg, id, &[]).await;
                done.set(true);
                r
            }
        });
        for _ in 0..200 {
            yield_now().await;
        }
        assert!(!done.get(), "a send completed with no buffer posted");
        let (got, buf) = bounded(consumer.recv(mem.slice(..))).await?;
        let got = got?;
        bounded(send).await???;
        assert_eq!((got.len(), got.imm()), (3, &[][..]));
        assert_eq!(&buf.to_vec()[..3], b"abc");
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
fn arguments_are_checked_before_anything_is_posted_or_sent() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-args").await?;
        let mem = inbox(&dev, 64)?;
        let e = Consumer::builder(&host, &mem).imm_data_len(MAX_IMM_DATA as u32 + 1).build().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(Producer::builder(&dpu).tasks(0).build().await.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let consumer = Consumer::builder(&host, &mem).imm_data_len(4).build().await?;
        let producer = Producer::builder(&dpu).build().await?;
        let id = bounded(dpu.next_remote_consumer()).await??;

        // A buffer of other memory, an empty one.
        let other = inbox(&dev, 64)?;
        assert_eq!(consumer.recv(other.slice(..8)).await.0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(consumer.recv(mem.slice(..0)).await.0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        // Too many immediate bytes for the runtime; an unknown consumer.
        let src = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
        let (r, _) = producer.send(src.slice(..1), id, &[0; MAX_IMM_DATA + 1]).await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let (r, _) = bounded(producer.send(src.slice(..1), id + 1000, &[])).await?;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);

        // More immediate bytes than the consumer takes, more data than its buffer: both
        // sides fail, and the next send and receive work.
        let post = |len| {
            let buf = mem.slice(..len);
            let c = &consumer;
            async move { c.recv(buf).await }
        };
        let (sent, got) =
            bounded(futures_lite::future::zip(producer.send(src.slice(..1), id, &[1; 5]), post(8))).await?;
        assert_eq!(sent.0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert!(got.0.is_err());
        let (sent, got) = bounded(futures_lite::future::zip(producer.send(src.slice(..9), id, &[]), post(8))).await?;
        assert_eq!(sent.0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert!(got.0.is_err());
        let (sent, got) =
            bounded(futures_lite::future::zip(producer.send(src.slice(..8), id, &[7; 4]), post(8))).await?;
        sent.0?;
        let got = got.0?;
        assert_eq!((got.len(), got.imm()), (8, &[7u8; 4][..]));
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// A consumer dropped is withdrawn: the peer's list forgets it and sends to it fail.
#[test]
fn a_dropped_consumer_is_withdrawn_from_the_peer() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-drop").await?;
        let mem = inbox(&dev, 64)?;
        let producer = Producer::builder(&dpu).build().await?;
        let first = Consumer::builder(&host, &mem).build().await?;
        let second = Consumer::builder(&host, &mem).build().await?;
        let a = bounded(dpu.next_remote_consumer()).await??;
        let b = bounded(dpu.next_remote_consumer()).await??;
        assert_eq!((a, b), (first.id(), second.id()));
        drop(first);
        bounded(async {
            while dpu.remote_consumers().contains(&a) {
                yield_now().await;
            }
        })
        .await?;
        assert_eq!(dpu.remote_consumers(), vec![b]);
        let src = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
        let (r, _) = bounded(producer.send(src.slice(..1), a, &[])).await?;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);
        // The other consumer still works.
        let (sent, got) =
            bounded(futures_lite::future::zip(producer.send(src.slice(..2), b, &[]), second.recv(mem.slice(..8))))
                .await?;
        sent.0?;
        assert_eq!(got.0?.len(), 2);
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Several sends to a consumer with no buffer posted all wait, and all complete as buffers
/// are posted: DOCA's AGAIN from a producer means "no buffer", which no completion of the
/// producer's other tasks resolves, so the sends must not wait for one.
#[test]
fn several_sends_waiting_for_buffers_all_complete() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-several").await?;
        let mem = inbox(&dev, 4 * 64)?;
        let consumer = Consumer::builder(&host, &mem).imm_data_len(1).build().await?;
        let producer = Producer::builder(&dpu).build().await?;
        let id = bounded(dpu.next_remote_consumer()).await??;
        let src = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
        let sends: Vec<_> = (0..4)
            .map(|i| {
                let (p, buf) = (producer.clone(), src.slice(i * 16..i * 16 + 4));
                spawn_local(async move { p.send(buf, id, &[i as u8]).await.0 })
            })
            .collect();
        for _ in 0..100 {
            yield_now().await;
        }
        let mut imms = Vec::new();
        for i in 0..4 {
            let (got, _) = bounded(consumer.recv(mem.slice(i * 64..(i + 1) * 64))).await?;
            imms.push(got?.imm()[0]);
        }
        for s in sends {
            bounded(s).await???;
        }
        imms.sort_unstable();
        assert_eq!(imms, [0, 1, 2, 3]);
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Receives posted ahead from the task that then sends, as a ping-pong posts them: each
/// side keeps two `RecvFuture`s in a queue (named, `Unpin`), each polled once to post it,
/// and the task goes on to its send at once. Every message lands in the oldest posted
/// buffer, round after round, both ways.
#[test]
fn receives_posted_ahead_by_the_sending_task_serve_a_ping_pong() {
    use futures_lite::future::poll_once;
    use std::collections::VecDeque;
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (_server, dpu, host) = pair(&dev, "fast-ahead").await?;
        let (a_mem, b_mem) = (inbox(&dev, 2 * 8)?, inbox(&dev, 2 * 8)?);
        let a = Consumer::builder(&host, &a_mem).tasks(2).build().await?;
        let b = Consumer::builder(&dpu, &b_mem).tasks(2).build().await?;
        let (to_b, to_a) = (Producer::builder(&host).build().await?, Producer::builder(&dpu).build().await?);
        let (b_id, a_id) = (bounded(host.next_remote_consumer()).await??, bounded(dpu.next_remote_consumer()).await??);
        let (mut a_posted, mut b_posted) = (VecDeque::new(), VecDeque::new());
        for k in 0..2 {
            let mut r = a.recv(a_mem.slice(k * 8..k * 8 + 8));
            assert!(poll_once(&mut r).await.is_none(), "a post does not complete at once");
            a_posted.push_back(r);
            let mut r = b.recv(b_mem.slice(k * 8..k * 8 + 8));
            assert!(poll_once(&mut r).await.is_none());
            b_posted.push_back(r);
        }
        let out = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
        let mut msg = out.buf();
        for round in 0..20u64 {
            // A to B, then B's answer; each posts again the buffer it just took.
            msg.write_u64(0, round);
            let (r, back) = bounded(to_b.send(msg, b_id, &[])).await?;
            r?;
            let (got, buf) = bounded(b_posted.pop_front().expect("posted")).await?;
            assert_eq!((got?.len(), buf.read_u64(0)), (8, round), "B's oldest buffer holds round {round}");
            let mut again = b.recv(buf);
            assert!(poll_once(&mut again).await.is_none());
            b_posted.push_back(again);
            let mut answer = back;
            answer.write_u64(0, round + 1000);
            let (r, back) = bounded(to_a.send(answer, a_id, &[])).await?;
            r?;
            msg = back;
            let (got, buf) = bounded(a_posted.pop_front().expect("posted")).await?;
            assert_eq!((got?.len(), buf.read_u64(0)), (8, round + 1000));
            let mut again = a.recv(buf);
            assert!(poll_once(&mut again).await.is_none());
            a_posted.push_back(again);
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}
