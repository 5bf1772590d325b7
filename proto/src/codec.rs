//! The protobuf codec of the service: prost's, except that a message that
//! does not decode is the sender's fault (INVALID_ARGUMENT), not the
//! receiver's (prost's codec says INTERNAL).

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstEncoder};

/// [`ProstCodec`] with decode errors reported as INVALID_ARGUMENT.
#[derive(Debug, Clone, Copy)]
pub struct ArgumentCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ArgumentCodec<T, U> {
    fn default() -> Self {
        ArgumentCodec(PhantomData)
    }
}

impl<T, U> Codec for ArgumentCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ArgumentDecoder(PhantomData)
    }
}

/// Decodes `U`; a malformed message is INVALID_ARGUMENT naming the problem.
#[derive(Debug, Clone, Copy)]
pub struct ArgumentDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for ArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| {
            Status::invalid_argument(format!(
                "malformed {} message: {e}",
                std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("protobuf")
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
