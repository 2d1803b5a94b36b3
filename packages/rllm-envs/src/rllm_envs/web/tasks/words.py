"""Word pools the task generators draw from (seeded, so instances are reproducible)."""

# fmt: off
# (one word a line would make these pools 300 lines long)

FIRST_NAMES = (
    "Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farah", "Gustav", "Hana", "Ivan", "Jonas",
    "Keiko", "Liam", "Maya", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tara",
    "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zoe",
)
LAST_NAMES = (
    "Abbott", "Becker", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito",
    "Jensen", "Kowalski", "Lopez", "Moreau", "Nakamura", "Okafor", "Petrov", "Quinn", "Rossi",
    "Schmidt", "Tanaka", "Ueda", "Varga", "Weber", "Xu", "Yilmaz", "Zhang",
)
CITIES = (
    "Amsterdam", "Ankara", "Athens", "Atlanta", "Auckland", "Austin", "Bangkok", "Barcelona",
    "Berlin", "Bern", "Bogota", "Boston", "Brisbane", "Brussels", "Cairo", "Calgary", "Canberra",
    "Cape Town", "Chicago", "Copenhagen", "Dakar", "Dallas", "Delhi", "Denver", "Dublin",
    "Helsinki", "Houston", "Lagos", "Lima", "Lisbon", "London", "Lyon", "Madrid", "Manila",
    "Marseille", "Melbourne", "Miami", "Milan", "Montreal", "Mumbai", "Munich", "Nairobi",
    "Naples", "Oslo", "Ottawa", "Paris", "Perth", "Porto", "Prague", "Quito", "Riga", "Rome",
    "Santiago", "Seoul", "Sydney", "Tokyo", "Toronto", "Vienna", "Warsaw", "Zurich",
)
COUNTRIES = (
    "Argentina", "Australia", "Austria", "Belgium", "Brazil", "Canada", "Chile", "Denmark",
    "Egypt", "Finland", "France", "Germany", "Ghana", "Greece", "India", "Ireland", "Italy",
    "Japan", "Kenya", "Mexico", "Morocco", "Netherlands", "Norway", "Peru", "Poland", "Portugal",
    "Senegal", "Spain", "Sweden", "Switzerland", "Thailand", "Turkey", "Uruguay", "Vietnam",
)
ADJECTIVES = (
    "Amber", "Bold", "Brisk", "Calm", "Coral", "Crimson", "Dusty", "Golden", "Ivory", "Jade",
    "Lunar", "Misty", "Navy", "Olive", "Polar", "Rapid", "Royal", "Rustic", "Silver", "Solar",
    "Swift", "Velvet", "Vivid", "Wild",
)
NOUNS = (
    "Anchor", "Backpack", "Blender", "Bottle", "Candle", "Chair", "Compass", "Desk", "Drone",
    "Headset", "Helmet", "Jacket", "Kettle", "Lamp", "Lantern", "Mug", "Notebook", "Pillow",
    "Printer", "Scarf", "Speaker", "Teapot", "Tent", "Toaster", "Umbrella", "Wallet", "Watch",
)
FRUITS = (
    "Apple", "Apricot", "Banana", "Cherry", "Coconut", "Date", "Fig", "Grape", "Kiwi", "Lemon",
    "Lime", "Mango", "Melon", "Orange", "Papaya", "Peach", "Pear", "Plum",
)
TOPICS = (
    "Astronomy", "Baking", "Beekeeping", "Chess", "Climbing", "Cycling", "Dance", "Fishing",
    "Gardening", "Geology", "Jazz", "Knitting", "Origami", "Painting", "Poetry", "Pottery",
    "Robotics", "Sailing", "Skiing", "Surfing", "Tennis", "Typography", "Weaving", "Yoga",
)
SECTIONS = ("Arts", "Science", "Sports", "Travel", "Food", "History", "Music", "Nature")
DEPARTMENTS = ("Sales", "Support", "Design", "Finance", "Legal", "Research", "Operations")
COMPANY_PARTS = (
    "Acme", "Bright", "Cobalt", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Iris", "Juniper",
    "Kestrel", "Lumen", "Meridian", "Nimbus", "Orchid", "Pioneer", "Quartz", "Redwood",
)
COMPANY_KINDS = ("Labs", "Works", "Systems", "Foods", "Motors", "Media", "Textiles", "Robotics")
PRODUCTS_KINDS = ("widgets", "bicycles", "software", "tea", "furniture", "toys", "solar panels")
SETTINGS = (
    "Email notifications", "Dark mode", "Auto-save", "Two-factor login", "Weekly digest",
    "Location access", "Sound effects", "Public profile",
)
WORDS = (
    "alpha", "bravo", "cedar", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "jasper",
    "kepler", "lotus", "maple", "nectar", "onyx", "pepper", "quill", "raven", "sable", "tundra",
)
# fmt: on
