//! The sample plugins as the UROM worker meets them: cargo-built shared objects, found (or
//! built) by `testing::sample_plugins_dir`, loaded with `dlopen` and driven through their C
//! entry points.

use doca_urom_plugin::samples::{graph, sandbox};
use doca_urom_plugin::testing::{sample_plugins_dir, Domain, LoadedPlugin, Member, Worker};
use doca_urom_plugin::Status;

#[test]
fn built_sample_plugins_load_and_answer() {
    let dir = sample_plugins_dir().expect("sample plugins");
    let g = LoadedPlugin::load(&dir.join(graph::FILE_NAME)).expect("load graph");
    let s = LoadedPlugin::load(&dir.join(sandbox::FILE_NAME)).expect("load sandbox");
    assert_eq!(g.version(), Ok(graph::VERSION));
    assert_eq!(s.version(), Ok(sandbox::VERSION));

    let mut gw = Worker::open(g.get_iface, Domain::new()).unwrap();
    gw.command(1, 5, 2, &graph::Cmd::Loopback { value: 99 }.encode()).unwrap();
    let got = gw.progress().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(graph::Notif::decode(got[0].packed.as_ref().unwrap()), Ok(graph::Notif::Loopback { value: 99 }));

    // Two sandbox instances from the same loaded object exchange a message.
    let domain = Domain::new();
    let mut a = Worker::open(s.get_iface, domain.clone()).unwrap();
    let mut b = Worker::open(s.get_iface, domain.clone()).unwrap();
    domain.set_member(10, Member { addr: Some(a.address().unwrap()), segs: vec![] });
    domain.set_member(20, Member { addr: Some(b.address().unwrap()), segs: vec![] });
    b.command(2, 1, 0, &sandbox::Cmd::recv(31, 4).encode()).unwrap();
    a.command(2, 2, 0, &sandbox::Cmd::send(32, 20, 4, b"via dlopen".to_vec()).encode()).unwrap();
    let sent = a.progress_until(1, 1000).unwrap();
    assert_eq!(
        sandbox::Notif::decode(sent[0].packed.as_ref().unwrap()),
        Ok(sandbox::Notif::TagSend { context: 32, status: sandbox::ucs::OK })
    );
    let got = b.progress_until(1, 5000).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, Status::SUCCESS);
    assert_eq!(
        sandbox::Notif::decode(got[0].packed.as_ref().unwrap()),
        Ok(sandbox::Notif::TagRecv {
            context: 31,
            sender_tag: 4,
            status: sandbox::ucs::OK,
            data: b"via dlopen".to_vec()
        })
    );
}
