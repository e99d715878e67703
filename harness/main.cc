// The splitcheck command line. Placeholder until the CLI lands.
int main() { return 0; }
