//! The protobuf codec of the generated services (`build.rs` names it with `codec_path`):
//! prost encoding exactly as `tonic_prost::ProstCodec`, with small initial buffers.
//!
//! tonic allocates a decode buffer and an encode buffer for every RPC when it starts, each
//! of `BufferSettings::buffer_size` bytes (8 KiB by default). A worker session is one
//! long-lived bidirectional stream that is idle most of the time, and its messages are
//! mostly well under 1 KiB, so the two eager 8 KiB buffers were most of the memory an idle
//! attached session held (BENCHMARKS.md, "Idle memory"). The buffers still grow on demand:
//! the decoder reserves a message's full length once its header is read and the encoder
//! writes through `BufMut`, which reserves as it goes, so large messages (up to the
//! configured message size limits) work as before and only pay a reallocation.

use std::fmt;
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial capacity of each per-RPC buffer. Large enough for the common messages (tool
/// call requests, decisions, acks) so that they never reallocate, small enough that an
/// idle stream's two buffers cost 2 KiB instead of 16 KiB.
pub const INITIAL_BUFFER_SIZE: usize = 1024;

/// tonic's default: the encoder hands its buffer to the transport once it holds this many
/// bytes of queued messages. Unchanged; only the initial size is ours.
pub const YIELD_THRESHOLD: usize = 32 * 1024;

/// The buffer settings every encoder and decoder of [`SmallBufferCodec`] uses.
pub fn buffer_settings() -> BufferSettings {
    BufferSettings::new(INITIAL_BUFFER_SIZE, YIELD_THRESHOLD)
}

/// `ProstCodec` with [`buffer_settings`]: `T` is the message encoded, `U` the message
/// decoded. Generated clients and servers build one per call with `Default`.
pub struct SmallBufferCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        SmallBufferCodec {
            _messages: PhantomData,
        }
    }
}

// Manual rather than derived: a derive would require `T: Clone + Debug` and `U: ...`,
// which the codec itself does not need.
impl<T, U> Clone for SmallBufferCodec<T, U> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<T, U> fmt::Debug for SmallBufferCodec<T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmallBufferCodec")
            .field("initial_buffer_size", &INITIAL_BUFFER_SIZE)
            .finish()
    }
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(buffer_settings())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codec::{Decoder, EncodeBody, Encoder, Streaming};
    use tonic::Status;

    /// Encodes `messages` into a gRPC body with the codec's encoder and decodes that body
    /// with its decoder, as a client's request stream reaches a server.
    async fn round_trip(messages: Vec<String>) -> Result<Vec<String>, Status> {
        let mut codec = SmallBufferCodec::<String, String>::default();
        let source = tokio_stream::iter(messages.into_iter().map(Ok));
        let body = EncodeBody::new_client(codec.encoder(), source, None, None);
        let mut decoded = Streaming::new_request(codec.decoder(), body, None, Some(8 << 20));
        let mut out = Vec::new();
        while let Some(message) = decoded.message().await? {
            out.push(message);
        }
        Ok(out)
    }

    #[test]
    fn encoder_and_decoder_start_small() {
        let mut codec = SmallBufferCodec::<String, String>::default();
        let expected = format!("{:?}", buffer_settings());
        assert_eq!(format!("{:?}", codec.encoder().buffer_settings()), expected);
        assert_eq!(format!("{:?}", codec.decoder().buffer_settings()), expected);
        assert!(expected.contains("buffer_size: 1024"), "{expected}");
    }

    #[tokio::test]
    async fn messages_larger_than_the_initial_buffer_round_trip() -> Result<(), Status> {
        let small = "a".repeat(10);
        let just_over = "b".repeat(INITIAL_BUFFER_SIZE + 1);
        let large = "c".repeat(60_000);
        let mib = "d".repeat(1 << 20);
        let messages = vec![
            small.clone(),
            mib.clone(),
            just_over.clone(),
            small,
            large,
            mib,
            String::new(),
            just_over,
        ];
        assert_eq!(round_trip(messages.clone()).await?, messages);
        Ok(())
    }

    #[tokio::test]
    async fn many_queued_messages_cross_the_yield_threshold() -> Result<(), Status> {
        let messages: Vec<String> = (0..200).map(|i| format!("{i}").repeat(300)).collect();
        assert_eq!(round_trip(messages.clone()).await?, messages);
        Ok(())
    }
}
