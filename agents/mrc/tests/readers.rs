//! Trace readers: the real traces read whole, and bad input stops with an
//! error naming the file and the record or line.

mod common;

use lachesis_mrc::trace::{self, Format, Progress, Request};
use lachesis_mrc::{Op, TraceError};
use std::io::Write;
use std::path::Path;

fn read(path: &Path, format: Format) -> Result<Vec<Request>, TraceError> {
    trace::read_all(path, format, Progress::Hidden)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn cloudphysics_csv_and_oracle_binary_agree() {
    let csv = read(
        &common::traces_dir().join("cloudPhysicsIO.csv"),
        Format::CloudPhysics,
    )
    .unwrap();
    let bin = &common::cloudphysics().requests;
    assert_eq!(csv.len(), 113_872);
    assert_eq!(bin.len(), 113_872);
    assert_eq!(common::unique(&csv), 48_974);
    // Same keys in the same order. Sizes differ in 13,671 rows: the CSV has
    // each request's size, the oracleGeneral conversion one size per object.
    assert!(csv.iter().zip(bin).all(|(a, b)| a.key == b.key));
    assert_eq!(csv[3].size, 6656);
    assert!(csv.iter().any(|r| r.op == Op::Write) && csv.iter().any(|r| r.op == Op::Read));
}

#[test]
fn arc_traces_expand_block_ranges() {
    assert_eq!(common::oltp().requests.len(), 914_145);
    let p3 = &common::p3().requests;
    assert_eq!(p3.len(), 3_912_296);
    assert_eq!(common::unique(p3), 762_543);
    // First line of P3 is `230027 8 0 0`.
    let keys: Vec<u64> = p3[..9].iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        vec![230027, 230028, 230029, 230030, 230031, 230032, 230033, 230034, 1842745]
    );
}

#[test]
fn format_detection() {
    let d = common::traces_dir();
    assert_eq!(
        Format::detect(&d.join("cloudPhysicsIO.csv")).unwrap(),
        Format::CloudPhysics
    );
    assert_eq!(
        Format::detect(&d.join("cloudPhysicsIO.oracleGeneral.bin")).unwrap(),
        Format::Oracle
    );
    assert_eq!(
        Format::detect(&d.join("arc/OLTP.lis.zst")).unwrap(),
        Format::Arc
    );
}

#[test]
fn truncated_oracle_names_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes =
        std::fs::read(common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin")).unwrap();
    bytes.truncate(24 * 1000 + 10);
    let p = write(dir.path(), "cut.oracleGeneral.bin", &bytes);
    let err = read(&p, Format::Oracle).unwrap_err();
    match &err {
        TraceError::Record { record, .. } => assert_eq!(*record, 1001),
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("cut.oracleGeneral.bin")
            && msg.contains("record 1001")
            && msg.contains("10 of 24"),
        "{msg}"
    );
}

#[test]
fn malformed_cloudphysics_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "bad.csv",
        b"version,time,op,size,lbn\n1,5,28,512,10\n1,6,28,512,xyz\n",
    );
    let msg = read(&p, Format::CloudPhysics).unwrap_err().to_string();
    assert!(
        msg.contains("bad.csv") && msg.contains("line 3") && msg.contains("lbn"),
        "{msg}"
    );

    let p = write(
        dir.path(),
        "short.csv",
        b"version,time,op,size,lbn\n1,5,28,512\n",
    );
    let msg = read(&p, Format::CloudPhysics).unwrap_err().to_string();
    assert!(msg.contains("line 2"), "{msg}");

    let p = write(dir.path(), "noheader.csv", b"1,5,28,512,10\n");
    let msg = read(&p, Format::CloudPhysics).unwrap_err().to_string();
    assert!(msg.contains("line 1") && msg.contains("header"), "{msg}");

    let p = write(
        dir.path(),
        "badop.csv",
        b"version,time,op,size,lbn\n1,5,zz,512,10\n",
    );
    let msg = read(&p, Format::CloudPhysics).unwrap_err().to_string();
    assert!(msg.contains("line 2") && msg.contains("op"), "{msg}");
}

#[test]
fn truncated_zstd_arc_is_an_error_not_a_short_trace() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(common::traces_dir().join("arc/OLTP.lis.zst")).unwrap();
    let p = write(dir.path(), "OLTP-cut.lis.zst", &bytes[..bytes.len() / 2]);
    let err = read(&p, Format::Arc).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("OLTP-cut.lis.zst") && msg.contains("line "),
        "{msg}"
    );
}

#[test]
fn malformed_arc_line_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "bad.lis", b"10 2 0 0\n\n20 x 0 1\n");
    let msg = read(&p, Format::Arc).unwrap_err().to_string();
    assert!(
        msg.contains("bad.lis") && msg.contains("line 3") && msg.contains("number_of_blocks"),
        "{msg}"
    );
    // Plain (uncompressed) .lis works, and blank lines carry nothing.
    let p = write(dir.path(), "ok.lis", b"10 2 0 0\n\n20 1 0 1\n");
    let keys: Vec<u64> = read(&p, Format::Arc)
        .unwrap()
        .iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(keys, vec![10, 11, 20]);
    // Compressed text is detected by its magic, whatever the name.
    let z = zstd_bytes(b"5 1 0 0\n6 3 0 1\n");
    let p = write(dir.path(), "packed.lis", &z);
    assert_eq!(read(&p, Format::Arc).unwrap().len(), 4);
}

fn zstd_bytes(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = zstd::stream::write::Encoder::new(&mut out, 3).unwrap();
    enc.write_all(data).unwrap();
    enc.finish().unwrap();
    out
}

#[test]
fn msr_expands_requests_into_4k_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "hm_0.csv",
        b"128166372003061629,hm,0,Read,8192,4096,1807\n\
          128166372016382155,hm,0,Write,4000,8192,1103\n\
          128166372026382245,hm,0,Read,40960,0,100\n",
    );
    let got = read(&p, Format::Msr).unwrap();
    let keys: Vec<(u64, Op)> = got.iter().map(|r| (r.key, r.op)).collect();
    // 4000..12192 touches blocks 0, 1 and 2; a zero-length read its block.
    assert_eq!(
        keys,
        vec![
            (2, Op::Read),
            (0, Op::Write),
            (1, Op::Write),
            (2, Op::Write),
            (10, Op::Read)
        ]
    );
    assert!(got.iter().all(|r| r.size == 4096));
    assert_eq!(Format::detect(&p).unwrap(), Format::Msr);

    let p = write(
        dir.path(),
        "bad_msr.csv",
        b"1,hm,0,Read,0,4096,1\n2,hm,0,Trim,0,4096,1\n",
    );
    let msg = read(&p, Format::Msr).unwrap_err().to_string();
    assert!(
        msg.contains("bad_msr.csv") && msg.contains("line 2") && msg.contains("Type"),
        "{msg}"
    );
    let p = write(dir.path(), "short_msr.csv", b"1,hm,0,Read,0\n");
    let msg = read(&p, Format::Msr).unwrap_err().to_string();
    assert!(msg.contains("line 1") && msg.contains("7 fields"), "{msg}");
}

#[test]
fn lines_take_numbers_names_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "keys.txt",
        b"42\nuser:alice\n\n42 4096\nuser:alice,100\n",
    );
    let got = read(&p, Format::Lines).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].key, 42);
    assert_eq!(got[1].key, got[3].key);
    assert_eq!((got[2].size, got[3].size), (4096, 100));
    let p = write(dir.path(), "badkeys.txt", b"1\n2 notasize\n");
    let msg = read(&p, Format::Lines).unwrap_err().to_string();
    assert!(
        msg.contains("badkeys.txt") && msg.contains("line 2") && msg.contains("size"),
        "{msg}"
    );
}

#[test]
fn missing_file_is_an_error() {
    let msg = read(Path::new("/nonexistent/trace.bin"), Format::Oracle)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("/nonexistent/trace.bin") && msg.contains("cannot open"),
        "{msg}"
    );
}
