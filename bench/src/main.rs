mod parity;
mod table;

fn main() {
    for row in parity::rows(128 << 10) {
        println!("{} {:.2}", row.name, row.gbps);
    }
}
