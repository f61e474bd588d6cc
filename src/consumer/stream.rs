//! [`Consumer::stream`]: records as a `futures_core::Stream`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{Consumer, ConsumerRecord};
use crate::error::{Error, Result};

/// How long one internal poll waits before polling again.
const POLL_SLICE: Duration = Duration::from_secs(1);

type NextRecord = Pin<Box<dyn Future<Output = Result<ConsumerRecord>> + Send>>;

/// A stream of records from a [`Consumer`]; see [`Consumer::stream`].
pub struct RecordStream {
    consumer: Consumer,
    next: Option<NextRecord>,
    done: bool,
}

impl std::fmt::Debug for RecordStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl RecordStream {
    pub(super) fn new(consumer: Consumer) -> Self {
        RecordStream {
            consumer,
            next: None,
            done: false,
        }
    }
}

async fn next_record(consumer: Consumer) -> Result<ConsumerRecord> {
    loop {
        let mut records = Vec::new();
        consumer.poll_up_to(POLL_SLICE, 1, &mut records).await?;
        if let Some(r) = records.pop() {
            return Ok(r);
        }
    }
}

impl futures_core::Stream for RecordStream {
    type Item = Result<ConsumerRecord>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let consumer = self.consumer.clone();
        let fut = self
            .next
            .get_or_insert_with(|| Box::pin(next_record(consumer)));
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.next = None;
                if matches!(r, Err(Error::Closed)) {
                    self.done = true;
                }
                Poll::Ready(Some(r))
            }
        }
    }
}
