//! What `tracing` writes, captured for a test to read: a writer every subscriber of a test can
//! hold a clone of.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The bytes logged so far through any clone of it.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// What was logged, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Forgets what was logged so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}
