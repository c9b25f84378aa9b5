//! `UROM_PLUGIN_PATH` steers the plugin search. Alone in its test binary because it sets a
//! process-wide environment variable.

use doca_urom_plugin::testing::{find_built_plugins, find_plugin, sample_plugins_dir, SAMPLE_PLUGIN_FILES};

#[test]
fn urom_plugin_path_is_searched_first_and_in_order() {
    let base = std::env::temp_dir().join(format!("urom-plugin-find-{}", std::process::id()));
    let (partial, full) = (base.join("partial"), base.join("full"));
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(partial.join(SAMPLE_PLUGIN_FILES[0]), b"").unwrap();
    for f in SAMPLE_PLUGIN_FILES {
        std::fs::write(full.join(f), b"").unwrap();
    }
    let path = format!("{};{};{}", base.join("missing").display(), partial.display(), full.display());
    // The only test in this binary: no other thread reads the environment meanwhile.
    std::env::set_var("UROM_PLUGIN_PATH", &path);
    // A directory counts only if it has both sample plugins...
    assert_eq!(find_built_plugins(), Some(full.clone()));
    assert_eq!(sample_plugins_dir(), Ok(full.clone()));
    // ...while a single file is found in the first directory that has it.
    assert_eq!(find_plugin(SAMPLE_PLUGIN_FILES[0]), Some(partial.join(SAMPLE_PLUGIN_FILES[0])));
    assert_eq!(find_plugin("libno_such_plugin.so"), None);
    std::env::remove_var("UROM_PLUGIN_PATH");
    let _ = std::fs::remove_dir_all(&base);
}
