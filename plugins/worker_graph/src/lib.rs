//! `worker_graph`, the simplest UROM plugin: answers each `Loopback` command with a `Loopback`
//! notification carrying the same value. The plugin is
//! [`doca_urom_plugin::samples::graph::Graph`] (formats in the same module, so the soft UROM
//! service can also offer it built in); this crate exports it as `libworker_graph.so`, which
//! the UROM service loads from `UROM_PLUGIN_PATH`. A command that does not decode is answered
//! with `DOCA_ERROR_INVALID_VALUE`; the worker carries on.
#![deny(unsafe_code)]

pub use doca_urom_plugin::samples::graph::Graph;
#[cfg(test)]
use doca_urom_plugin::samples::graph::{Cmd, Notif, VERSION};
#[cfg(test)]
use doca_urom_plugin::Status;

doca_urom_plugin::export_plugin!(Graph);

#[cfg(test)]
mod tests {
    use super::*;
    use doca_urom_plugin::testing::{Domain, Worker};

    #[test]
    fn loopback_echoes_the_value() {
        let mut w = Worker::open(urom_plugin_get_iface, Domain::new()).unwrap();
        for (i, value) in [0, 42, u64::MAX].into_iter().enumerate() {
            w.command(1 << 2, i as u64, 9, &Cmd::Loopback { value }.encode()).unwrap();
        }
        let got = w.progress().unwrap();
        assert_eq!(got.len(), 3);
        for (i, (n, value)) in got.iter().zip([0, 42, u64::MAX]).enumerate() {
            assert_eq!((n.plugin, n.urom_context, n.dest_id, n.status), (1 << 2, i as u64, 9, Status::SUCCESS));
            assert_eq!(Notif::decode(n.packed.as_ref().unwrap()), Ok(Notif::Loopback { value }));
        }
        assert!(w.progress().unwrap().is_empty());
    }

    #[test]
    fn malformed_command_is_invalid_value_and_the_plugin_stays_alive() {
        let mut w = Worker::open(urom_plugin_get_iface, Domain::new()).unwrap();
        let good = Cmd::Loopback { value: 7 }.encode();
        w.command(1, 1, 1, &good[..5]).unwrap();
        w.command(1, 2, 1, b"").unwrap();
        w.command(1, 3, 1, &[good.as_slice(), &[0]].concat()).unwrap();
        w.command(1, 4, 1, &good).unwrap();
        let got = w.progress().unwrap();
        let statuses: Vec<_> = got.iter().map(|n| (n.urom_context, n.status)).collect();
        assert_eq!(
            statuses,
            [(1, Status::INVALID_VALUE), (2, Status::INVALID_VALUE), (3, Status::INVALID_VALUE), (4, Status::SUCCESS)]
        );
        assert_eq!(got[0].packed.as_deref(), Ok(&[][..]));
        assert_eq!(Notif::decode(got[3].packed.as_ref().unwrap()), Ok(Notif::Loopback { value: 7 }));
    }

    #[test]
    fn reports_its_version() {
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        #[allow(unsafe_code)]
        let st = unsafe { urom_plugin_get_version(&mut v) };
        assert_eq!((Status(st), v), (Status::SUCCESS, VERSION));
    }
}
