//! The start's directory checks, on the simulated disk (and, for a
//! directory that exists but refuses writes, on a disk that refuses them
//! under one path: the tests may run as root, whom permissions do not
//! stop).

use narad_disk::sim::SimDisk;
use narad_disk::{BackendKind, FileHandle};
use narad_wal::segment::segment_name;

use super::*;

const DATA: &str = "/node";
const WAL_ROOT: &str = "/nvme/narad";

fn sim() -> SimDisk {
    SimDisk::new(41)
}

/// Puts an empty file at `path`, creating its parent.
fn put_file(disk: &dyn Disk, path: &Path) {
    disk.create_dir_all(path.parent().expect("a parent"))
        .expect("parent created");
    disk.open(path, OpenOptions::CREATE).expect("file created");
}

/// Leaves segment 0 of a WAL in the data directory, as a node that ran
/// without `storage.wal_dir` does.
fn wal_under_data_dir(disk: &dyn Disk) -> PathBuf {
    let dir = ingress_wal_dir(Path::new(DATA));
    put_file(disk, &dir.join(segment_name(0)));
    dir
}

#[test]
fn the_wal_lives_in_ingress_produce_under_its_root() {
    assert_eq!(
        ingress_wal_dir(Path::new("/a/b")),
        PathBuf::from("/a/b/ingress/produce")
    );
}

#[test]
fn without_a_wal_dir_the_wal_is_under_the_data_dir() {
    let disk = sim();
    let wal_dir = prepare(&disk, Path::new(DATA), None).expect("usable");
    assert_eq!(wal_dir, PathBuf::from("/node/ingress/produce"));
    assert!(disk.exists(&wal_dir).expect("exists"));
}

#[test]
fn a_wal_dir_holds_the_wal_and_nothing_of_it_is_made_under_the_data_dir() {
    let disk = sim();
    let wal_dir = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect("usable");
    assert_eq!(wal_dir, PathBuf::from("/nvme/narad/ingress/produce"));
    assert!(disk.exists(&wal_dir).expect("exists"));
    assert!(disk.exists(Path::new(DATA)).expect("exists"));
    assert!(
        !disk
            .exists(&Path::new(DATA).join("ingress"))
            .expect("exists")
    );
}

#[test]
fn the_write_probe_is_removed() {
    let disk = sim();
    let wal_dir = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect("usable");
    assert!(disk.list_dir(&wal_dir).expect("listed").is_empty());
    assert_eq!(
        disk.list_dir(Path::new(DATA)).expect("listed"),
        [] as [String; 0]
    );
}

#[test]
fn a_wal_left_under_the_data_dir_refuses_a_start_with_a_wal_dir() {
    let disk = sim();
    let found = wal_under_data_dir(&disk);
    let error = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect_err("refused");
    assert!(
        matches!(&error, DirError::WalLeftBehind { found: at, .. } if *at == found),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "storage.wal_dir is /nvme/narad, but an ingress WAL is still in /node/ingress/produce: \
         a new, empty WAL would strand the acknowledged records it may hold. Stop the node and \
         move it (mkdir -p /nvme/narad/ingress && cp -a /node/ingress/produce /nvme/narad/ingress \
         && sync && rm -r /node/ingress/produce), or unset storage.wal_dir"
    );
}

#[test]
fn a_refused_start_creates_nothing_under_the_wal_dir() {
    let disk = sim();
    wal_under_data_dir(&disk);
    prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect_err("refused");
    assert!(!disk.exists(Path::new(WAL_ROOT)).expect("exists"));
}

#[test]
fn a_wal_dir_equal_to_the_data_dir_finds_its_own_wal_there() {
    let disk = sim();
    let found = wal_under_data_dir(&disk);
    let wal_dir = prepare(&disk, Path::new(DATA), Some(Path::new("/node/"))).expect("usable");
    assert_eq!(wal_dir, found);
}

#[test]
fn a_default_wal_directory_without_segments_does_not_refuse() {
    let disk = sim();
    put_file(
        &disk,
        &ingress_wal_dir(Path::new(DATA)).join("next-segment.prep"),
    );
    prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect("usable");
}

#[test]
fn a_wal_dir_that_is_a_file_is_refused_naming_the_setting_and_path() {
    let disk = sim();
    put_file(&disk, Path::new(WAL_ROOT));
    let error = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect_err("refused");
    let text = error.to_string();
    assert!(
        text.starts_with(
            "storage.wal_dir: /nvme/narad/ingress/produce: cannot create the directory: "
        ),
        "{text}"
    );
}

#[test]
fn a_data_dir_that_is_a_file_is_refused_naming_the_setting_and_path() {
    let disk = sim();
    put_file(&disk, Path::new(DATA));
    let error = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect_err("refused");
    assert!(
        error
            .to_string()
            .starts_with("storage.data_dir: /node: cannot create the directory: "),
        "{error}"
    );
}

/// The simulated disk, refusing to create files under one directory, as
/// a directory without write permission does.
#[derive(Debug)]
struct ReadOnlyUnder {
    disk: SimDisk,
    read_only: PathBuf,
}

impl ReadOnlyUnder {
    fn refuses(&self, path: &Path) -> bool {
        path.starts_with(&self.read_only)
    }

    fn denied() -> io::Error {
        io::Error::from(io::ErrorKind::PermissionDenied)
    }
}

impl Disk for ReadOnlyUnder {
    fn kind(&self) -> BackendKind {
        self.disk.kind()
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<FileHandle> {
        if options.create && self.refuses(path) && !self.disk.exists(path)? {
            return Err(Self::denied());
        }
        self.disk.open(path, options)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if self.refuses(path) && !self.disk.exists(path)? {
            return Err(Self::denied());
        }
        self.disk.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.disk.list_dir(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.disk.exists(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.disk.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.disk.rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.disk.sync_dir(path)
    }
}

#[test]
fn an_unwritable_wal_dir_is_refused_naming_the_setting_and_path() {
    let sim = sim();
    let wal_dir = ingress_wal_dir(Path::new(WAL_ROOT));
    sim.create_dir_all(&wal_dir).expect("created");
    let disk = ReadOnlyUnder {
        disk: sim,
        read_only: PathBuf::from(WAL_ROOT),
    };
    let error = prepare(&disk, Path::new(DATA), Some(Path::new(WAL_ROOT))).expect_err("refused");
    assert!(
        matches!(&error, DirError::Unusable { setting: "storage.wal_dir", path, .. } if *path == wal_dir),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "storage.wal_dir: /nvme/narad/ingress/produce: cannot create a file in it: permission denied"
    );
}
