//! tarn-parity
