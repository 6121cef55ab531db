int add(int, int);
int main() { return add(2, 2) == 4 ? 0 : 1; }
