//! What the Comch lanes keep alive when dropped: the memory (and descriptors) of the buffers
//! they posted and of the sends in flight, until DOCA is done with them; then nothing.

use std::time::Duration;

use super::{Consumer, Producer};
use crate::comch::{Client, Server};
use crate::executor::time::timeout;
use crate::executor::yield_now;
use crate::{spawn_local, Access, Device, Memory};

/// Long enough for anything these tests wait for; a hang fails instead of blocking CI.
const LIMIT: Duration = Duration::from_secs(20);

/// Yields until `mem` has `n` handles (or gives up after many turns); how many it has.
async fn settle(mem: &Memory, n: usize) -> usize {
    for _ in 0..1000 {
        if mem.handles() == n {
            break;
        }
        yield_now().await;
    }
    mem.handles()
}

#[test]
fn dropped_lanes_keep_their_memory_until_doca_is_done() {
    crate::testkit::runtime()
        .block_on(async {
            let dev = Device::open_default()?;
            let name = format!("unit-lanes-drop-{}", std::process::id());
            let server = Server::builder(&dev, &name).build().await?;
            let client = spawn_local({
                let (dev, name) = (dev.clone(), name.clone());
                async move { Client::builder(&dev, &name).connect().await }
            });
            let dpu = timeout(LIMIT, server.accept()).await??;
            let host = timeout(LIMIT, client).await???;
            let mem = dev.alloc(16, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
            let consumer = Consumer::builder(&host, &mem).tasks(2).build().await?;
            let producer = Producer::builder(&dpu).build().await?;
            let id = timeout(LIMIT, dpu.next_remote_consumer()).await??;

            // Two buffers posted by lanes that are then dropped: DOCA may still write them.
            let base = mem.handles();
            let mut posted = consumer.recv_lanes(mem.buf(), 2)?;
            for _ in 0..2 {
                posted.lane().await.1.submit();
            }
            let in_lanes = mem.handles();
            assert!(in_lanes > base, "the lanes hold the memory");
            drop(posted);
            for _ in 0..50 {
                yield_now().await;
            }
            assert_eq!(mem.handles(), in_lanes, "posted memory is kept while DOCA may write it");

            // Two sends fill them; the send lanes are dropped with the second in flight.
            let src = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            let src_base = src.handles();
            let mut sends = producer.lanes(src.buf(), 1, id)?;
            let src_in_lanes = src.handles();
            for v in [5u64, 6] {
                let (prev, mut lane) = timeout(LIMIT, sends.lane()).await?;
                if let Some(r) = prev {
                    r?;
                }
                lane.write_u64(0, v);
                lane.submit();
            }
            assert_eq!(sends.len(), 1);
            drop(sends);
            assert_eq!(src.handles(), src_in_lanes, "a send in flight keeps its memory");

            // Once both completions are in, both lanes' memory is given back.
            assert_eq!(settle(&src, src_base).await, src_base, "the send lanes' memory is released");
            assert_eq!(settle(&mem, base).await, base, "the receive lanes' memory is released");
            assert_eq!((mem.buf().read_u64(0), mem.buf().read_u64(8)), (5, 6), "both messages landed");
            assert_eq!(producer.inner.ctx.outstanding_tasks(), 0);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}
