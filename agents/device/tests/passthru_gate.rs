//! Opening the NVMe passthrough backend without an NVMe drive: every way of getting the path
//! wrong is a clear error. (Commands against a real namespace are exercised in the QEMU tests.)

use lachesis_device::nvme::{NvmeConfig, NvmePassthru};
use lachesis_device::Error;

#[test]
fn missing_device() {
    let e = NvmePassthru::open("/dev/ng9n9", NvmeConfig::default()).unwrap_err();
    assert!(matches!(e, Error::DeviceNotFound { .. }), "{e}");
    assert_eq!(e.to_string(), "/dev/ng9n9: no such device");
}

#[test]
fn regular_file_is_not_a_generic_device() {
    let f = tempfile::NamedTempFile::new().unwrap();
    let e = NvmePassthru::open(f.path(), NvmeConfig::default()).unwrap_err();
    match &e {
        Error::NotNvmeGenericDevice { reason, .. } => assert_eq!(reason, "not a character device"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .contains("not an NVMe generic character device (/dev/ngXnY)"),
        "{e}"
    );
}

#[test]
fn other_character_device_is_not_nvme() {
    let e = NvmePassthru::open("/dev/null", NvmeConfig::default()).unwrap_err();
    match &e {
        Error::NotNvmeGenericDevice { reason, .. } => {
            assert!(reason.starts_with("NVME_IOCTL_ID failed"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn bad_queue_depth_is_rejected() {
    let e = NvmePassthru::open(
        "/dev/null",
        NvmeConfig {
            queue_depth: 0,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}
