//! NVMe command encodings and FDP data structure layouts, checked against byte and dword
//! expectations written from the NVMe specification's field tables (not from this crate's
//! encoder), so an encoder and parser that agree with each other but not with the spec fail.

use lachesis_device::nvme::cmd::{self, DsmRange, NvmeCommand};
use lachesis_device::nvme::identify;
use lachesis_device::nvme::logpage::*;

fn dw(b: &[u8; 80], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

/// Byte offsets of `struct nvme_uring_cmd`: CDW10 at 40, CDW11 44, ..., CDW15 60.
fn cdw(b: &[u8; 80], n: usize) -> u32 {
    assert!((10..=15).contains(&n));
    dw(b, 40 + 4 * (n - 10))
}

#[test]
fn ioctl_command_codes_match_the_kernel_uapi() {
    // _IOWR('N', 0x80 / 0x82, struct nvme_uring_cmd) with sizeof = 72 (0x48).
    assert_eq!(cmd::NVME_URING_CMD_IO, 0xC048_4E80);
    assert_eq!(cmd::NVME_URING_CMD_ADMIN, 0xC048_4E82);
}

#[test]
fn write_with_placement_directive() {
    let c = cmd::write(1, 0x1_2345_6789, 8, 0xdead_beef_0000, 32768, Some(5)).unwrap();
    let b = c.to_uring_cmd();
    assert_eq!(b[0], 0x01, "opcode: write");
    assert_eq!(b[1], 0, "flags");
    assert_eq!(&b[4..8], &[1, 0, 0, 0], "nsid");
    assert_eq!(
        &b[24..32],
        &0xdead_beef_0000u64.to_le_bytes(),
        "data address"
    );
    assert_eq!(&b[36..40], &[0x00, 0x80, 0x00, 0x00], "data_len 32768");
    // SLBA: CDW10 = low 32 bits, CDW11 = high 32 bits.
    assert_eq!(&b[40..44], &[0x89, 0x67, 0x45, 0x23]);
    assert_eq!(&b[44..48], &[0x01, 0x00, 0x00, 0x00]);
    // CDW12: NLB zero-based in 15:0, DTYPE = 2 in 23:20.
    assert_eq!(cdw(&b, 12), 0x0020_0007);
    assert_eq!(&b[48..52], &[0x07, 0x00, 0x20, 0x00]);
    assert_eq!(cdw(&b, 12) & 0xffff, 7, "NLB is zero-based");
    assert_eq!(
        (cdw(&b, 12) >> 20) & 0xff,
        2,
        "DTYPE in bits 20..27 (spec: 23:20)"
    );
    // CDW13: DSPEC in 31:16.
    assert_eq!(cdw(&b, 13), 0x0005_0000);
    assert_eq!(&b[52..56], &[0x00, 0x00, 0x05, 0x00]);
    assert_eq!(cdw(&b, 14), 0);
    assert_eq!(cdw(&b, 15), 0);
    assert!(
        b[64..80].iter().all(|&x| x == 0),
        "timeout, reserved and the unused SQE tail stay zero"
    );
}

#[test]
fn write_without_placement_and_read_carry_no_directive() {
    let w = cmd::write(2, 16, 1, 0x1000, 4096, None)
        .unwrap()
        .to_uring_cmd();
    assert_eq!(w[0], 0x01);
    assert_eq!(cdw(&w, 12), 0, "one block, no DTYPE");
    assert_eq!(cdw(&w, 13), 0, "no DSPEC");
    let r = cmd::read(2, 0xffff_ffff_0000_0010, 65536, 0x2000, 1 << 28)
        .unwrap()
        .to_uring_cmd();
    assert_eq!(r[0], 0x02, "opcode: read");
    assert_eq!(&r[4..8], &[2, 0, 0, 0]);
    assert_eq!(cdw(&r, 10), 0x0000_0010);
    assert_eq!(cdw(&r, 11), 0xffff_ffff);
    assert_eq!(cdw(&r, 12), 0xffff, "65536 blocks encode as 0xffff");
    assert_eq!(cdw(&r, 13), 0);
    assert_eq!(dw(&r, 36), 1 << 28);
}

#[test]
fn block_counts_outside_the_16_bit_field_are_rejected() {
    assert!(cmd::read(1, 0, 0, 0, 0).is_err());
    assert!(cmd::write(1, 0, 65537, 0, 0, None).is_err());
}

#[test]
fn dataset_management_deallocate() {
    let c = cmd::dsm_deallocate(1, 0x4000, 2).unwrap().to_uring_cmd();
    assert_eq!(c[0], 0x09, "opcode: dataset management");
    assert_eq!(cdw(&c, 10), 1, "NR: number of ranges, zero-based");
    assert_eq!(cdw(&c, 11), 0b100, "AD (deallocate) attribute is bit 2");
    assert_eq!(dw(&c, 36), 32, "two 16-byte ranges");
    let ranges = DsmRange::encode(&[
        DsmRange { slba: 0x10, nlb: 8 },
        DsmRange {
            slba: 0x1_0000_0000,
            nlb: 1,
        },
    ]);
    #[rustfmt::skip]
    let want: [u8; 32] = [
        0, 0, 0, 0,  8, 0, 0, 0,  0x10, 0, 0, 0, 0, 0, 0, 0, // context attributes, length (1-based), SLBA
        0, 0, 0, 0,  1, 0, 0, 0,  0, 0, 0, 0, 1, 0, 0, 0,
    ];
    assert_eq!(ranges, want);
    assert!(cmd::dsm_deallocate(1, 0, 0).is_err());
    assert!(cmd::dsm_deallocate(1, 0, 257).is_err());
}

#[test]
fn io_management_receive_ruh_status() {
    let c = cmd::ruh_status(3, 0x8000, 4096).unwrap().to_uring_cmd();
    assert_eq!(c[0], 0x12, "opcode: I/O management receive");
    assert_eq!(&c[4..8], &[3, 0, 0, 0]);
    assert_eq!(cdw(&c, 10) & 0xff, 0x01, "MO: reclaim unit handle status");
    assert_eq!(cdw(&c, 11), 1023, "NUMD: dwords, zero-based");
    assert!(
        cmd::ruh_status(3, 0, 6).is_err(),
        "not a whole number of dwords"
    );
}

#[test]
fn get_log_page_for_each_fdp_log() {
    for (lid, len) in [(0x20u8, 4096u32), (0x21, 2056), (0x22, 64), (0x23, 4096)] {
        let c = cmd::get_log_page(lid, 0, 7, 0, 0x9000, len)
            .unwrap()
            .to_uring_cmd();
        assert_eq!(c[0], 0x02, "admin opcode: get log page");
        assert_eq!(
            &c[4..8],
            &[0, 0, 0, 0],
            "FDP logs are endurance-group scoped: no nsid"
        );
        let numd = len / 4 - 1;
        assert_eq!(
            cdw(&c, 10),
            u32::from(lid) | (numd << 16),
            "LID 7:0, LSP 14:8, NUMDL 31:16"
        );
        assert_eq!(
            cdw(&c, 11),
            7 << 16,
            "NUMDU 15:0 = 0, LSI (endurance group) 31:16"
        );
        assert_eq!(cdw(&c, 12), 0);
        assert_eq!(cdw(&c, 13), 0);
        assert_eq!(cdw(&c, 14), 0, "UUID index 0, CSI 0 (NVM)");
    }
    // FDP statistics exactly: LID 0x22, 64 bytes = 16 dwords -> NUMDL 15.
    let s = cmd::get_log_page(0x22, 0, 1, 0, 0, 64)
        .unwrap()
        .to_uring_cmd();
    assert_eq!(
        &s[40..48],
        &[0x22, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x01, 0x00]
    );
    // Host events: LSP bit 0; a 1 MiB transfer spills NUMD into NUMDU; the offset spans CDW12/13.
    let e = cmd::get_log_page(0x23, 1, 1, 0x1_0000_0010, 0, 1 << 20)
        .unwrap()
        .to_uring_cmd();
    assert_eq!(cdw(&e, 10), 0x23 | (1 << 8) | (0xffff << 16));
    assert_eq!(cdw(&e, 11), 0x3 | (1 << 16));
    assert_eq!(cdw(&e, 12), 0x10);
    assert_eq!(cdw(&e, 13), 0x1);
    assert!(
        cmd::get_log_page(0x22, 0x80, 1, 0, 0, 64).is_err(),
        "LSP is 7 bits"
    );
    assert!(
        cmd::get_log_page(0x22, 0, 1, 2, 0, 64).is_err(),
        "offset must be dword aligned"
    );
}

#[test]
fn identify_and_get_features() {
    let c = cmd::identify(1, 0, 0x1000).to_uring_cmd();
    assert_eq!(c[0], 0x06);
    assert_eq!(cdw(&c, 10), 1, "CNS 1: controller");
    assert_eq!(dw(&c, 36), 4096);
    let f = cmd::get_features(0x1d, 5).to_uring_cmd();
    assert_eq!(f[0], 0x0a);
    assert_eq!(
        cdw(&f, 10),
        0x1d,
        "FID 0x1d: flexible data placement, SEL 0 (current)"
    );
    assert_eq!(cdw(&f, 11), 5, "endurance group");
}

#[test]
fn command_struct_is_the_kernel_layout() {
    let c = NvmeCommand {
        opcode: 0xaa,
        flags: 0xbb,
        nsid: 0x0403_0201,
        cdw2: 0x1111_1111,
        cdw3: 0x2222_2222,
        metadata: 0x3333_3333_3333_3333,
        addr: 0x4444_4444_4444_4444,
        metadata_len: 0x5555_5555,
        data_len: 0x6666_6666,
        cdw10: 10,
        cdw11: 11,
        cdw12: 12,
        cdw13: 13,
        cdw14: 14,
        cdw15: 15,
        timeout_ms: 0x7777_7777,
    };
    let b = c.to_uring_cmd();
    assert_eq!((b[0], b[1], b[2], b[3]), (0xaa, 0xbb, 0, 0));
    assert_eq!(dw(&b, 4), 0x0403_0201);
    assert_eq!(dw(&b, 8), 0x1111_1111);
    assert_eq!(dw(&b, 12), 0x2222_2222);
    assert_eq!(&b[16..24], &[0x33; 8]);
    assert_eq!(&b[24..32], &[0x44; 8]);
    assert_eq!(dw(&b, 32), 0x5555_5555);
    assert_eq!(dw(&b, 36), 0x6666_6666);
    for n in 10..=15 {
        assert_eq!(cdw(&b, n), n as u32);
    }
    assert_eq!(dw(&b, 64), 0x7777_7777);
    assert_eq!(&b[68..80], &[0; 12]);
}

// ------------------------------------------------------------------ log page parse fixtures

#[test]
fn fdp_statistics_log_page() {
    let mut page = [0u8; 64];
    // HBMW (bytes 0-15) = 2^64 + 4096
    page[1] = 0x10;
    page[8] = 0x01;
    // MBMW (bytes 16-31) = 0x3000
    page[17] = 0x30;
    // MBE (bytes 32-47) = 2^100: byte 44 holds bits 96-103
    page[44] = 0x10;
    // bytes 48-63 reserved: garbage must be ignored
    page[50] = 0xff;
    let s = FdpStats::parse(&page).unwrap();
    assert_eq!(s.host_bytes_written, (1u128 << 64) + 4096);
    assert_eq!(s.media_bytes_written, 0x3000);
    assert_eq!(s.media_bytes_erased, 1u128 << 100);
    let mut enc = s.encode();
    enc[50] = 0xff;
    assert_eq!(enc, page);
    let later = FdpStats {
        host_bytes_written: s.host_bytes_written + 1000,
        media_bytes_written: s.media_bytes_written + 1500,
        ..s
    };
    assert_eq!(later.dlwa_since(&s), Some(1.5));
    assert_eq!(s.dlwa_since(&s), None);
}

#[test]
fn ruh_status_descriptor_layout() {
    let mut buf = vec![0u8; 16 + 2 * 32];
    buf[14] = 2; // NRUHSD
                 // descriptor 0 at 16: PID 0, RUHID 0, EARUTR 60 s, RUAMW 0x1000 blocks
    buf[16 + 4] = 60;
    buf[16 + 9] = 0x10;
    // descriptor 1 at 48: PID 1, RUHID 3, RUAMW 0x0102030405060708
    buf[48] = 1;
    buf[48 + 2] = 3;
    buf[48 + 8..48 + 16].copy_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
    buf[48 + 20] = 0xee; // reserved
    let list = RuhStatus::parse_list(&buf).unwrap();
    assert_eq!(
        list,
        vec![
            RuhStatus {
                placement_id: 0,
                ruh_id: 0,
                time_remaining_s: 60,
                available_media_writes: 0x1000
            },
            RuhStatus {
                placement_id: 1,
                ruh_id: 3,
                time_remaining_s: 0,
                available_media_writes: 0x0102_0304_0506_0708
            },
        ]
    );
    buf[48 + 20] = 0;
    assert_eq!(RuhStatus::encode_list(&list).unwrap(), buf);
}

#[test]
fn fdp_configurations_log_page() {
    let mut buf = vec![0u8; 16 + 72];
    buf[0] = 0; // NUMFDPC: one configuration (zero-based)
    buf[4] = 88; // log size
    let d = 16;
    buf[d] = 72; // DSZE: 64-byte header + 2 RUH descriptors
    buf[d + 2] = 0x80; // FDPA: valid, RGIF 0
    buf[d + 4] = 1; // NRG
    buf[d + 8] = 2; // NRUH
    buf[d + 10] = 1; // MAXPIDS (zero-based): 2
    buf[d + 12] = 1; // NNSS
    buf[d + 16..d + 24].copy_from_slice(&(6u64 << 30).to_le_bytes()); // RUNS: 6 GiB
    buf[d + 64] = 1; // RUH 0: initially isolated
    buf[d + 68] = 2; // RUH 1: persistently isolated
    let log = FdpConfigurations::parse(&buf).unwrap();
    assert_eq!(log.configs.len(), 1);
    let c = &log.configs[0];
    assert!(c.valid);
    assert_eq!(c.rgif, 0);
    assert_eq!(c.reclaim_groups, 1);
    assert_eq!(c.max_placement_ids, 2);
    assert_eq!(c.namespaces, 1);
    assert_eq!(c.reclaim_unit_bytes, 6 << 30);
    assert_eq!(
        c.ruh_types,
        vec![RuhType::InitiallyIsolated, RuhType::PersistentlyIsolated]
    );
    assert_eq!(log.encode().unwrap(), buf);
    // A descriptor claiming more handles than its size holds is malformed, not a panic.
    buf[d + 8] = 9;
    assert!(FdpConfigurations::parse(&buf).is_err());
}

#[test]
fn ruh_usage_log_page() {
    let mut buf = vec![0u8; 8 + 3 * 8];
    buf[0] = 3;
    buf[8] = 1; // host specified
    buf[16] = 2; // controller specified
    let u = RuhUsage::parse_list(&buf).unwrap();
    assert_eq!(
        u,
        vec![
            RuhUsage {
                host_specified: true,
                controller_specified: false
            },
            RuhUsage {
                host_specified: false,
                controller_specified: true
            },
            RuhUsage::default(),
        ]
    );
    assert_eq!(RuhUsage::encode_list(&u).unwrap(), buf);
}

#[test]
fn fdp_events_log_page_media_reallocated() {
    let mut buf = vec![0u8; 64 + 63 * 64];
    buf[0] = 1; // number of events
    let e = 64;
    buf[e] = 0x80; // media reallocated
    buf[e + 1] = 0b111; // PIV | NSIDV | LV
    buf[e + 2] = 1; // PID
    buf[e + 4..e + 10].copy_from_slice(&[0x10, 0x27, 0, 0, 0, 0]); // timestamp 10000 ms
    buf[e + 12] = 1; // NSID
    buf[e + 16] = 1; // LBAV
    buf[e + 18..e + 20].copy_from_slice(&0x0100u16.to_le_bytes()); // NLBAM
    buf[e + 20..e + 28].copy_from_slice(&0x1234u64.to_le_bytes()); // LBA
    buf[e + 32] = 0; // RGID
    buf[e + 34] = 1; // RUHID
    let ev = FdpEvent::parse_log(&buf).unwrap();
    assert_eq!(
        ev,
        vec![FdpEvent {
            kind: FdpEventType::MediaReallocated,
            placement_id: Some(1),
            timestamp_ms: 10_000,
            nsid: Some(1),
            location: Some((0, 1)),
            reallocated: Some(MediaReallocated {
                lbas_moved: 256,
                lba: Some(0x1234)
            }),
        }]
    );
    assert_eq!(FdpEvent::encode_log(&ev), buf);
}

#[test]
fn identify_fields() {
    let mut ctrl = vec![0u8; 4096];
    ctrl[77] = 5; // MDTS
    ctrl[98] = 0x08; // CTRATT bit 19
    let c = identify::parse_controller(&ctrl).unwrap();
    assert!(c.fdp_supported);
    assert_eq!(c.mdts, 5);
    ctrl[98] = 0;
    assert!(!identify::parse_controller(&ctrl).unwrap().fdp_supported);

    let mut ns = vec![0u8; 4096];
    ns[0..8].copy_from_slice(&0x10_0000u64.to_le_bytes()); // NSZE
    ns[26] = 1; // FLBAS: format 1
    ns[128 + 4 + 2] = 12; // LBAF1.LBADS: 4096-byte blocks
    ns[128 + 2] = 9; // LBAF0: 512 (not in use)
    ns[102] = 1; // ENDGID
    let n = identify::parse_namespace(&ns).unwrap();
    assert_eq!(n.blocks, 0x10_0000);
    assert_eq!(n.block_size, 4096);
    assert_eq!(n.endurance_group, 1);
    ns[26] = 2; // format 2 has LBADS 0: malformed
    assert!(identify::parse_namespace(&ns).is_err());
    assert!(identify::parse_namespace(&ns[..100]).is_err());
}
