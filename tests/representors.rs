//! `Device::representors` and a Comch server bound to a representor, in the soft provider's
//! DPU role. The role is process-wide (`DOCA_SOFT_ROLE`), so the DPU-side checks run in a
//! child process of this test binary; the host side (`NotSupported`) is a unit test of
//! `src/device.rs`.

use std::process::{Command, Stdio};

use async_doca::comch::{Client, Server};
use async_doca::{spawn_local, Device, ErrorKind, Runtime};

const CHILD: &str = "ASYNC_DOCA_TEST_REPRESENTORS_CHILD";

/// What the child checks, as the DPU side.
fn dpu_side() {
    let dev = Device::open_default().unwrap();
    let pci = dev.info().pci_addr.clone();
    let reps = dev.representors().unwrap();
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert_eq!(reps[0].pci_addr, pci, "the host PF with the device's own address");
    assert!(!reps[0].vuid.is_empty());
    // By PCI address (both forms) and by VUID; an unknown address is NotFound.
    let rep = dev.open_representor_by_pci(pci.strip_prefix("0000:").unwrap_or(&pci)).unwrap();
    assert_eq!(rep.info(), &reps[0]);
    let by_vuid = dev.open_representor_by_vuid(&reps[0].vuid).unwrap();
    assert_eq!(by_vuid.info(), &reps[0]);
    assert_eq!(dev.open_representor_by_pci("0000:7f:1f.7").unwrap_err().kind(), ErrorKind::NotFound);
    // A Comch server bound to the representor serves a client and keeps the rep open.
    let name = format!("rep-server-{}", std::process::id());
    Runtime::builder()
        .cpus("0".parse().unwrap())
        .build()
        .unwrap()
        .block_on(async move {
            let server = Server::builder(&dev, &name).representor(&rep).build().await?;
            drop(rep);
            let client = spawn_local({
                let dev = dev.clone();
                async move {
                    let conn = Client::builder(&dev, &name).connect().await?;
                    conn.send(b"hello".to_vec()).await?;
                    Ok::<_, async_doca::Error>(conn)
                }
            });
            let conn = server.accept().await?;
            assert_eq!(conn.recv().await.as_deref(), Some(&b"hello"[..]));
            drop(client.await);
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn dpu_role_lists_and_binds_the_host_representor() {
    if std::env::var_os(CHILD).is_some() {
        dpu_side();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dpu_role_lists_and_binds_the_host_representor", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("DOCA_SOFT_ROLE", "dpu")
        .env_remove("DOCA_SOFT_DEVICES")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
