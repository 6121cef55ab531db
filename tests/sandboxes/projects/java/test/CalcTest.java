import org.junit.Test;
import static org.junit.Assert.assertEquals;

public class CalcTest {
    @Test public void adds() { assertEquals(4, Calc.add(2, 2)); }
    @Test public void zero() { assertEquals(0, Calc.add(0, 0)); }
}
