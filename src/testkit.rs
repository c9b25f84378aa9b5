//! Test helpers shared by the unit tests of several runtime modules (the workspace's test
//! convention: one crate-level `testkit`, compiled only for tests). Integration tests have
//! their own helpers in `tests/common/`.

use crate::oob::{Oob, OobRequest};
use crate::rdma::{Connection, Rdma};
use crate::{Access, Device, Result, Runtime};

/// A runtime with one executor, on CPU 0: what most unit tests run their futures on.
pub(crate) fn runtime() -> Runtime {
    Runtime::builder().cpus("0".parse().expect("a CPU list")).build().expect("a runtime on CPU 0")
}

/// Two RDMA contexts on the current executor allowing every access, connected with blobs:
/// (a, b, a's connection to b, b's connection to a).
pub(crate) async fn rdma_pair(dev: &Device) -> Result<(Rdma, Rdma, Connection, Connection)> {
    let a = Rdma::builder(dev).permissions(Access::RDMA_ALL).build().await?;
    let b = Rdma::builder(dev).permissions(Access::RDMA_ALL).build().await?;
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let ab = pa.connect(&blob_b).await?;
    let ba = pb.connect(&blob_a).await?;
    Ok((a, b, ab, ba))
}

/// A two-member out-of-band group seen from rank 0, whose peer contributes `peer` to every
/// allgather: for tests of what a member does with a hostile or corrupt announcement (an
/// absurd count or length) without a second process.
pub(crate) struct LyingPeer {
    pub(crate) peer: Vec<u8>,
}

impl Oob for LyingPeer {
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        2
    }
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        Ok(Box::new(Gathered(Some([data, &self.peer].concat()))))
    }
}

/// An allgather that is already complete.
struct Gathered(Option<Vec<u8>>);

impl OobRequest for Gathered {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.0.take())
    }
}

/// Tests every request of one allgather (one per member, all in this process) until all
/// completed; their results in member order. Panics if they never finish.
pub(crate) fn drive_all(mut reqs: Vec<Box<dyn OobRequest>>) -> Vec<Vec<u8>> {
    let mut out: Vec<Option<Vec<u8>>> = reqs.iter().map(|_| None).collect();
    for _ in 0..100_000 {
        for (r, o) in reqs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                *o = r.test().unwrap();
            }
        }
        if out.iter().all(|o| o.is_some()) {
            return out.into_iter().flatten().collect();
        }
        std::thread::yield_now();
    }
    panic!("allgather did not finish");
}
