//! A JetStream object store bucket read through its stream with
//! STREAM.INFO and STREAM.MSG.GET only, which the stream's leader
//! answers. async-nats' own `list` and `get` create a consumer each,
//! which in a cluster missing a node times out whenever it is placed on
//! that node; these reads work as long as the uploads do.

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::object_store::ObjectInfo;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use tokio_stream::StreamExt;

pub struct Bucket {
    name: String,
    stream: Stream,
}

impl Bucket {
    pub fn new(name: &str, stream: Stream) -> Self {
        Self {
            name: name.to_string(),
            stream,
        }
    }

    /// Every object that is not deleted.
    pub async fn objects(&self) -> Result<Vec<ObjectInfo>, String> {
        let mut subjects = self
            .stream
            .info_with_subjects(format!("$O.{}.M.>", self.name))
            .await
            .map_err(|e| e.to_string())?;
        let mut names = Vec::new();
        while let Some(entry) = subjects.next().await {
            names.push(entry.map_err(|e| e.to_string())?.0);
        }
        names.sort();
        let mut objects = Vec::new();
        for subject in names {
            if let Some(info) = self.info_at(&subject).await? {
                objects.push(info);
            }
        }
        Ok(objects)
    }

    /// Object `name`, None when there is none (or it was deleted).
    pub async fn info(&self, name: &str) -> Result<Option<ObjectInfo>, String> {
        self.info_at(&format!("$O.{}.M.{}", self.name, URL_SAFE.encode(name)))
            .await
    }

    async fn info_at(&self, subject: &str) -> Result<Option<ObjectInfo>, String> {
        match self.stream.get_last_raw_message_by_subject(subject).await {
            Ok(m) => {
                let info: ObjectInfo = serde_json::from_slice(&m.payload)
                    .map_err(|e| format!("unreadable object description on {subject}: {e}"))?;
                Ok((!info.deleted).then_some(info))
            }
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The first chunk of object `info` from stream sequence `from` on
    /// (its `sequence` and `payload`); None past the last one.
    pub async fn chunk(
        &self,
        info: &ObjectInfo,
        from: u64,
    ) -> Result<Option<StreamMessage>, String> {
        let request = self
            .stream
            .raw_message_builder()
            .sequence(from)
            .next_by_subject(format!("$O.{}.C.{}", self.name, info.nuid));
        match request.send().await {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}
