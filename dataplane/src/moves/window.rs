//! Which chunks of one file a move's copy asks for next, which it writes,
//! and how far the file is whole: the copy's window, with no I/O.
//!
//! A copy keeps up to `fetches_max` chunk fetches outstanding and writes
//! the chunks in file order, one write at a time, while the next fetches
//! are out: the source reads and sends chunk *n + 1* while this node
//! writes chunk *n*. The file is whole below [`CopyWindow::whole_to`]: the
//! end of the last chunk whose write completed, never further. A short
//! chunk (the source's file ends sooner than listed) drops the fetches
//! past it and asks again from where it ended; an empty one ends the copy
//! with an error.

use std::collections::VecDeque;

/// One chunk: `len` bytes of the file from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Where it starts in the file.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl Chunk {
    fn end(self) -> u64 {
        self.offset + self.len
    }
}

/// What an arrived chunk asks of the copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Write these bytes (the whole chunk, or the short part that came);
    /// `dropped` are fetches past a short chunk, to be abandoned.
    Write {
        /// What to write once the write before it completed.
        chunk: Chunk,
        /// Outstanding fetches that no longer count, oldest first.
        dropped: Vec<Chunk>,
    },
    /// The source sent nothing: its file ends at `offset`, before the
    /// listed end.
    EndsEarly {
        /// Where the file ended.
        offset: u64,
    },
}

/// The window of one file's copy of `[from, end)`.
#[derive(Debug)]
pub struct CopyWindow {
    end: u64,
    chunk_bytes: u64,
    fetches_max: usize,
    /// The next byte to ask for.
    next: u64,
    /// Fetches outstanding, in file order.
    asked: VecDeque<Chunk>,
    /// The chunk being written, if any.
    writing: Option<Chunk>,
    /// Whole below this.
    whole_to: u64,
}

impl CopyWindow {
    /// A copy of `[from, end)` in chunks of at most `chunk_bytes`, with at
    /// most `fetches_max` fetches outstanding (at least one).
    pub fn new(from: u64, end: u64, chunk_bytes: u64, fetches_max: usize) -> Self {
        Self {
            end,
            chunk_bytes: chunk_bytes.max(1),
            fetches_max: fetches_max.max(1),
            next: from,
            asked: VecDeque::new(),
            writing: None,
            whole_to: from,
        }
    }

    /// The next fetch to send, if the window has room and bytes are left
    /// to ask for; it counts as outstanding from here on.
    pub fn next_fetch(&mut self) -> Option<Chunk> {
        if self.asked.len() >= self.fetches_max || self.next >= self.end {
            return None;
        }
        let chunk = Chunk {
            offset: self.next,
            len: (self.end - self.next).min(self.chunk_bytes),
        };
        self.next = chunk.end();
        self.asked.push_back(chunk);
        Some(chunk)
    }

    /// The oldest outstanding fetch: the one whose answer is awaited next.
    pub fn awaited(&self) -> Option<Chunk> {
        self.asked.front().copied()
    }

    /// The oldest outstanding fetch answered with `len` bytes.
    ///
    /// # Panics
    /// With no fetch outstanding: a caller awaits [`Self::awaited`] only.
    pub fn arrived(&mut self, len: u64) -> Arrival {
        let asked = self
            .asked
            .pop_front()
            .expect("an answer arrives only for an outstanding fetch");
        if len == 0 {
            self.asked.clear();
            self.next = asked.offset;
            return Arrival::EndsEarly {
                offset: asked.offset,
            };
        }
        let chunk = Chunk {
            offset: asked.offset,
            len: len.min(asked.len),
        };
        let dropped = if chunk.len < asked.len {
            self.next = chunk.end();
            self.asked.drain(..).collect()
        } else {
            Vec::new()
        };
        Arrival::Write { chunk, dropped }
    }

    /// Whether a write is under way (the next must wait for it).
    pub fn writing(&self) -> bool {
        self.writing.is_some()
    }

    /// `chunk`'s write started.
    ///
    /// # Panics
    /// When another write is under way, or `chunk` does not start where
    /// the file is whole: writes go one at a time, in file order.
    pub fn write_started(&mut self, chunk: Chunk) {
        assert!(self.writing.is_none(), "one write at a time");
        assert_eq!(chunk.offset, self.whole_to, "writes go in file order");
        self.writing = Some(chunk);
    }

    /// The write under way completed: the file is whole to its end.
    pub fn write_done(&mut self) {
        if let Some(chunk) = self.writing.take() {
            self.whole_to = chunk.end();
        }
    }

    /// The file holds every byte below this.
    pub fn whole_to(&self) -> u64 {
        self.whole_to
    }

    /// Whether every byte of `[from, end)` is written.
    pub fn done(&self) -> bool {
        self.writing.is_none() && self.asked.is_empty() && self.whole_to >= self.end
    }

    /// Fetches outstanding now.
    pub fn outstanding(&self) -> usize {
        self.asked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetches(window: &mut CopyWindow) -> Vec<Chunk> {
        std::iter::from_fn(|| window.next_fetch()).collect()
    }

    fn chunk(offset: u64, len: u64) -> Chunk {
        Chunk { offset, len }
    }

    #[test]
    fn the_window_asks_for_at_most_fetches_max_chunks_and_a_short_last_one() {
        let mut window = CopyWindow::new(10, 100, 40, 2);
        assert_eq!(fetches(&mut window), vec![chunk(10, 40), chunk(50, 40)]);
        assert_eq!(window.awaited(), Some(chunk(10, 40)));
        assert_eq!(
            window.arrived(40),
            Arrival::Write {
                chunk: chunk(10, 40),
                dropped: vec![]
            }
        );
        // One answered: room for the last, short chunk.
        assert_eq!(fetches(&mut window), vec![chunk(90, 10)]);
        assert_eq!(window.outstanding(), 2);
    }

    #[test]
    fn the_file_is_whole_only_to_the_end_of_the_last_completed_write() {
        let mut window = CopyWindow::new(0, 30, 10, 3);
        fetches(&mut window);
        let Arrival::Write { chunk: first, .. } = window.arrived(10) else {
            panic!("a full chunk is written");
        };
        window.write_started(first);
        assert!(window.writing());
        // Arrived and written are not the same: nothing is whole yet.
        let Arrival::Write { chunk: second, .. } = window.arrived(10) else {
            panic!("a full chunk is written");
        };
        assert_eq!(window.whole_to(), 0);
        window.write_done();
        assert_eq!(window.whole_to(), 10);
        window.write_started(second);
        window.write_done();
        assert_eq!(window.whole_to(), 20);
        assert!(!window.done());
        let Arrival::Write { chunk: third, .. } = window.arrived(10) else {
            panic!("a full chunk is written");
        };
        window.write_started(third);
        assert!(!window.done(), "not done while the last write runs");
        window.write_done();
        assert!(window.done());
        assert_eq!(window.whole_to(), 30);
    }

    #[test]
    #[should_panic(expected = "writes go in file order")]
    fn a_write_out_of_file_order_is_refused() {
        let mut window = CopyWindow::new(0, 30, 10, 3);
        fetches(&mut window);
        window.write_started(chunk(10, 10));
    }

    #[test]
    fn a_short_chunk_drops_the_fetches_past_it_and_asks_again_from_its_end() {
        let mut window = CopyWindow::new(0, 100, 10, 3);
        assert_eq!(fetches(&mut window).len(), 3);
        assert_eq!(
            window.arrived(4),
            Arrival::Write {
                chunk: chunk(0, 4),
                dropped: vec![chunk(10, 10), chunk(20, 10)]
            }
        );
        assert_eq!(window.outstanding(), 0);
        assert_eq!(
            fetches(&mut window),
            vec![chunk(4, 10), chunk(14, 10), chunk(24, 10)]
        );
    }

    #[test]
    fn an_empty_answer_ends_the_copy_where_the_source_file_ended() {
        let mut window = CopyWindow::new(0, 100, 10, 3);
        fetches(&mut window);
        assert_eq!(window.arrived(0), Arrival::EndsEarly { offset: 0 });
        assert_eq!(window.outstanding(), 0);
        assert_eq!(window.whole_to(), 0);
        assert!(!window.done());
    }

    #[test]
    fn an_answer_longer_than_asked_writes_only_what_was_asked() {
        let mut window = CopyWindow::new(0, 10, 10, 1);
        fetches(&mut window);
        assert_eq!(
            window.arrived(25),
            Arrival::Write {
                chunk: chunk(0, 10),
                dropped: vec![]
            }
        );
    }

    #[test]
    fn a_copy_with_nothing_left_is_done_at_once() {
        let mut window = CopyWindow::new(50, 50, 10, 4);
        assert_eq!(window.next_fetch(), None);
        assert!(window.done());
    }
}
