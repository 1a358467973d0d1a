//! tarn-codec
