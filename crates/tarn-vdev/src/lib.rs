//! tarn-vdev
