int add(int, int);
int main() { return add(0, 0) == 0 ? 0 : 1; }
